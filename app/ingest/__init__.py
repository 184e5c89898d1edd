"""Importers and exporters: streaming, transactional, idempotent."""
