"""Dynamic tables: a query's result kept in a change-tracked table within a target lag of its
sources, by refreshes that apply the query's changes (plan/) through the one commit path.

``spec`` (options), ``definition`` (the query: its IR, what it reads, the refresh mode it can
have), ``points`` (a data timestamp -> the version of every table a query reads),
``apply`` (a minimum delta applied to the stored rows by ROW_ID), ``refresh`` (one refresh, and a
refresh of a DAG at one data timestamp), ``create`` (CREATE, ALTER, DROP).
"""
