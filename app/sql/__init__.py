"""Low-level SQL helpers shared by importers and services.

Dialect inserts, bulk inserts, JSON paths, storable values, row lookup, versioned caches and
kept results: nothing here knows the domain's wings, and both ``app.ingest`` and
``app.services`` build on it.
"""
