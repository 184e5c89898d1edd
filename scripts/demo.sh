#!/usr/bin/env bash
# Install everything, import the bundled real data into the embedded SQLite store, serve the dashboard.
# The install is skipped when .venv already holds what this checkout asks for (ensure_installed.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/ensure_installed.sh
exec .venv/bin/appellate demo "$@"
