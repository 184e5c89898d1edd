"""A standing corpus of hostile import files, each refused with ``file:line: field: reason``."""
