-- changed: a
SELECT k, x * 2 AS x2 FROM a WHERE x > 2
