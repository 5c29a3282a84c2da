-- view inner_v: SELECT a.k, x, y FROM a JOIN b ON a.k = b.k
-- changed: a
SELECT k, x + y AS s FROM inner_v WHERE y IS NOT NULL
