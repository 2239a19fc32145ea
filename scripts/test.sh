#!/usr/bin/env bash
# The whole test suite (unit, compat, functional). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -z "${VIRTUAL_ENV:-}" ] && [ -x .venv/bin/python ] && . .venv/bin/activate
export PYSPARK_PYTHON="$(command -v python)"
exec python -m pytest -q tests "$@"
