-- changed: a, b
SELECT k FROM a UNION SELECT k FROM b
