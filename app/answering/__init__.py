"""A local model answering multiple-choice items: parameters, prompts and store bookkeeping."""
