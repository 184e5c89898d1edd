"""Background workers: the job runner and everything that touches torch."""
