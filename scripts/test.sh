#!/usr/bin/env bash
# Install everything (Python packages, Debian chromium for browser tests) and run the whole suite
# against SQLite and PostgreSQL (127.0.0.1:5432, trust auth, database "test").
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh

if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = "0" ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    else
        sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    fi
fi

PG_URL="${APPELLATE_TEST_POSTGRES_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/test}"
export APPELLATE_TEST_POSTGRES_URL="$PG_URL"
export APPELLATE_TEST_DATABASES="${APPELLATE_TEST_DATABASES:-sqlite,postgresql}"
if [[ "$APPELLATE_TEST_DATABASES" == *postgresql* ]]; then
    if ! pg_isready -h 127.0.0.1 -p 5432 -q 2>/dev/null; then
        # Start the machine's cluster if it is installed but stopped.
        if command -v pg_ctlcluster >/dev/null; then
            pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql)" main start || true
            sleep 2
        fi
    fi
fi

.venv/bin/ruff check .
.venv/bin/ruff format --check .

set +e
# A base temp directory of this checkout's own: pytest prunes old numbered directories under the
# shared /tmp/pytest-of-$USER, which would pull the rug from under a second run on the machine.
.venv/bin/python -m pytest -q --basetemp=.pytest-tmp "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
