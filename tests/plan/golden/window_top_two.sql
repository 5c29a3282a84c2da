-- changed: a
SELECT k, x FROM a QUALIFY row_number() OVER (ORDER BY x DESC) <= 2
