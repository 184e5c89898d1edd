#!/usr/bin/env bash
# Install everything, import the bundled real data into the embedded SQLite store, serve the dashboard.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
exec .venv/bin/appellate demo "$@"
