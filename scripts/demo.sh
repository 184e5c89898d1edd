#!/usr/bin/env bash
# Install everything, import the bundled real data into the embedded SQLite store, serve the dashboard.
# The install is skipped when .venv already holds what this checkout's pyproject.toml and
# install script ask for (the package itself is installed editable: code changes need none).
set -euo pipefail
cd "$(dirname "$0")/.."
STAMP=.venv/.appellate-install
WANT="$(cat pyproject.toml scripts/install.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    ./scripts/install.sh
    echo "$WANT" > "$STAMP"
fi
exec .venv/bin/appellate demo "$@"
