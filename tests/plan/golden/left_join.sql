-- changed: a, b
SELECT a.k, x, y FROM a LEFT JOIN b ON a.k = b.k
