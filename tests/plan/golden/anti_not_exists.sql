-- changed: a, b
SELECT k, x FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k)
