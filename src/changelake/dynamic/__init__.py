"""Dynamic tables and tasks.

Dynamic tables: a query's result kept in a change-tracked table within a target lag of its
sources, by refreshes that apply the query's changes (plan/) through the one commit path.
``spec`` (options), ``definition`` (the query: its IR, what it reads, the refresh mode it can
have), ``evaluate`` (the query at one point), ``apply`` (a minimum delta applied to the stored
rows by ROW_ID), ``refresh`` (one refresh), ``dag`` (a DAG at one data timestamp), ``create``
(CREATE, ALTER, DROP).

Tasks: statements run on a schedule, after other tasks, or when streams have data. ``tasks``
(CREATE, ALTER, DROP; graphs), ``task_spec`` (schedule, options, WHEN), ``task_run`` (one graph
run), ``task_scheduler`` (what is due). ``scheduler`` runs both in ``changelake serve``;
``service`` answers the HTTP routes.
"""
