"""The statement context: what a statement reads, what it must require at commit, the transaction.

No Spark and no SQL parsing here: values and the rules that relate them to the catalog.
"""
