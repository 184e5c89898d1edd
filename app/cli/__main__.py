"""``python -m app.cli``: the ``appellate`` command, for environments without its script."""

from app.cli import main

main()
