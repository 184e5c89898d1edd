"""Tests of table."""
