"""The table wing: browsing a benchmark's instances.

Filter, sort, kept order and facets of the instance table, one instance and its models'
answers.
"""
