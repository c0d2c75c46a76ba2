#!/usr/bin/env bash
# test.sh - install what the tests need (idempotent), then run the whole suite.
# USAGE: scripts/test.sh [pytest args...]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
exec .venv/bin/python -m pytest -q -ra "$@"
