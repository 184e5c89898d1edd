"""Tests of disagreements."""
