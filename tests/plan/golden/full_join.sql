-- changed: b
SELECT a.k AS ak, b.k AS bk FROM a FULL OUTER JOIN b ON a.k = b.k
