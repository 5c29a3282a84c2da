-- changed: a
SELECT k, x, rank() OVER (PARTITION BY k ORDER BY x) AS r FROM a
