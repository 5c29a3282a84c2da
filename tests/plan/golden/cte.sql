-- changed: a, b
WITH big AS (SELECT k, x FROM a WHERE x > 1) SELECT big.k, y FROM big JOIN b ON big.k = b.k
