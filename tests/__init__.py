"""Test suite of Appellate."""
