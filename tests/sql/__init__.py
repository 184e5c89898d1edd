"""Tests of sql."""
