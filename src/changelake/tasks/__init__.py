"""Tasks: statements run on a schedule, after other tasks, or when streams have data. ``define``
(CREATE, ALTER, DROP; graphs of tasks), ``spec`` (schedule, options, WHEN), ``run`` (one graph
run), ``due`` (which graphs are due). ``changelake.scheduling`` runs them.
"""
