"""External tables on PostgreSQL: ``postgres`` (connecting), ``replication`` (the publication
and slot changelake owns on the source), ``pgoutput`` and ``pgtypes`` (the logical replication
protocol, its values), ``pgtable`` (CREATE: a snapshot in the slot's exported snapshot),
``follow`` (one follow step), ``scope`` (SCOPE = DEPENDENTS and its rescopes).
"""
