"""Lie-detector datasets: formats, builders and the ``build_dataset`` job's builders."""
