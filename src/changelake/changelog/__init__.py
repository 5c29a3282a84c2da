"""Changelogs exchanged with other systems.

Out: ``export.py`` writes change results as files. In: ``APPLY CHANGES INTO target FROM source
KEYS (...) SEQUENCE BY col ...`` applies a changelog (ODF, Flink, Debezium or Snowflake rows, or
plain upserts) to a keyed table as one statement: per key the event with the greatest sequence
wins, late and duplicate events change nothing, deletes leave tombstones so later-arriving older
events are judged, and SCD TYPE 2 keeps the history of each key (``apply.py`` is the pipeline,
``state.py`` the companion table that remembers what was applied).
"""
