#!/usr/bin/env bash
# Run ./scripts/install.sh unless .venv already holds what this checkout's pyproject.toml and
# install script ask for (a stamp of both, written after a successful install). The package is
# installed editable, so code changes need no reinstall; a changed dependency spec does.
set -euo pipefail
cd "$(dirname "$0")/.."
STAMP=.venv/.appellate-install
WANT="$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ] || [ ! -x .venv/bin/python ]; then
    ./scripts/install.sh
    echo "$WANT" > "$STAMP"
else
    echo "install: .venv matches pyproject.toml and scripts/install.sh (stamp $STAMP); skipped"
fi
