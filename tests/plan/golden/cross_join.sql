-- changed: a
SELECT a.k AS ak, b.k AS bk FROM a CROSS JOIN b WHERE x = y
