"""Pairwise judging shared by the CLI, the web form and the workers."""
