#!/usr/bin/env bash
# test.sh - install what the tests need (idempotent), then run the whole suite.
# USAGE: scripts/test.sh [pytest args...]
#
# The suite runs on a worker per CPU, at most 4 (pytest-xdist, the tests of a file on
# one worker, so that its module fixtures are made once; --dist loadgroup does not group
# on pytest 9.2: pytest-xdist issue 1386), the files handed out longest first in the
# order tests/conftest.py gives (--no-loadscope-reorder). MONGOPROBE_TEST_WORKERS sets
# how many, 0 runs it in this process. Tests marked serial run alone (tests/conftest.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
workers=${MONGOPROBE_TEST_WORKERS:-$(( $(nproc) < 4 ? $(nproc) : 4 ))}
exec .venv/bin/python -m pytest -q -ra -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
