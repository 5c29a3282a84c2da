-- changed: a, b
SELECT a.k, x, y FROM a JOIN b ON a.k = b.k
