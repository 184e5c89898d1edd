"""Exporters: corrected benchmark releases, changelogs and CSV-injection-safe cells."""
