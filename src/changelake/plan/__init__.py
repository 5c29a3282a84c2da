"""Queries over changelake tables, views and streams, bound to Spark DataFrames."""
