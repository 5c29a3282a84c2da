-- changed: b
SELECT DISTINCT b.k FROM a JOIN b ON a.k = b.k
