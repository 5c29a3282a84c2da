-- changed: b
SELECT k, x FROM a WHERE k IN (SELECT k FROM b WHERE y > 1)
