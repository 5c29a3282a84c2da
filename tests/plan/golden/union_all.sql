-- changed: b
SELECT k, x FROM a UNION ALL SELECT k, y FROM b
