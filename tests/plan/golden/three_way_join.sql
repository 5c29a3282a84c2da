-- changed: a, c
SELECT a.k, x, y, z FROM a JOIN b ON a.k = b.k JOIN c ON b.k = c.k
