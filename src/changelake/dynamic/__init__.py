"""Dynamic tables: a query's result kept in a change-tracked table within a target lag of its
sources, by refreshes that apply the query's changes (plan/) through the one commit path.
``spec`` (options), ``definition`` (the query: its IR, what it reads, the refresh mode it can
have), ``evaluate`` (the query at one point), ``maintain`` and ``measures`` (an aggregate kept
from stored state), ``refresh`` (one refresh), ``dag`` (a DAG at one data timestamp),
``create`` (CREATE, ALTER, DROP). ``changelake.scheduling`` keeps them fresh.
"""
