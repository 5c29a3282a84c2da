-- changed: a
SELECT k, count(*) AS n, sum(x) AS s FROM a GROUP BY k HAVING count(*) > 1
