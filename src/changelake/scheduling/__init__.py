"""Where dynamic tables, external tables and tasks meet: ``scheduler`` keeps every dynamic table
within its target lag, follows external tables and runs the task graphs that are due, in
``changelake serve``; ``service`` answers the HTTP routes of dynamic tables and tasks.
"""
