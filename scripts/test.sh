#!/usr/bin/env bash
# Install everything (Python packages, Debian chromium for browser tests) and run the whole suite
# against SQLite and PostgreSQL (127.0.0.1:5432, trust auth, database "test"). The install is
# skipped when .venv already matches the dependency spec; the wall time of each phase is printed
# at the end.
set -euo pipefail
cd "$(dirname "$0")/.."

PHASES=()
phase_start=$SECONDS
run_start=$SECONDS
# End the current phase: record its wall time under NAME and start the next one.
phase_done() {
    PHASES+=("$(printf '%-10s %6d s' "$1" $((SECONDS - phase_start)))")
    phase_start=$SECONDS
}
report_phases() {
    echo "== wall time per phase =="
    printf '%s\n' "${PHASES[@]}"
    printf '%-10s %6d s (load average: %s)\n' "total" $((SECONDS - run_start)) \
        "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown)"
}
trap report_phases EXIT

./scripts/ensure_installed.sh
phase_done install

if [ ! -x /usr/bin/chromium ]; then
    if [ "$(id -u)" = "0" ]; then
        apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    else
        sudo apt-get update -q && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium
    fi
fi
phase_done chromium

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

phase_done postgres

.venv/bin/ruff check .
.venv/bin/ruff format --check .
phase_done ruff

set +e
# A base temp directory of this checkout's own: pytest prunes old numbered directories under the
# shared /tmp/pytest-of-$USER, which would pull the rug from under a second run on the machine.
# --durations and the per-file totals (tests/support/file_durations.py) say where the time goes.
# One pytest worker per core (at least two). Each has its own SQLite files and PostgreSQL
# databases (uuid-named, created and dropped by the fixtures) and its own browser; the forms
# inventory checks the submissions of the browser tests its own worker ran. More workers than
# cores overran the cores once the real-model tests ran side by side. Work stealing: an idle
# worker takes tests queued on a busy one, so a minute-long real-model test does not leave the
# other core idle at the end.
WORKERS="${APPELLATE_TEST_WORKERS:-$(nproc 2>/dev/null || echo 2)}"
if [ "$WORKERS" -lt 2 ]; then WORKERS=2; fi
.venv/bin/python -m pytest -q -n "$WORKERS" --dist worksteal --basetemp=.pytest-tmp \
    --durations=30 "$@"
status=$?
set -e
phase_done pytest
if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing" >&2
    exit 1
fi
exit "$status"
