"""Appellate: audit benchmark labels and detector disagreements in LLM evaluation."""
