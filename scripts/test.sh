#!/usr/bin/env bash
# test.sh - install what the tests need (idempotent), then run the whole suite.
# USAGE: scripts/test.sh [pytest args...]
#
# The suite runs on a worker per CPU and one more, at most 4 (pytest-xdist, the tests of
# a file on one worker, so that its module fixtures are made once; --dist loadgroup does
# not group on pytest 9.2: pytest-xdist issue 1386), the files handed out longest first
# in the order tests/conftest.py gives (--no-loadscope-reorder). MONGOPROBE_TEST_WORKERS
# sets how many, 0 runs it in this process. Tests marked serial run alone
# (tests/conftest.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
# The extra worker fills the CPUs while other tests wait for a tracer's attach or end.
# 2 CPUs, fresh clones: 589-634 s with 3 workers; 580-664 s with 4 (6 runs: the CPUs
# 92-94% busy instead of 86-92%, a gain within the runs' noise, and two failures of
# tests timed on a loaded machine), so 3; 893 s with 3 and 958-966 s with 2, an older
# suite.
workers=${MONGOPROBE_TEST_WORKERS:-$(( $(nproc) < 3 ? $(nproc) + 1 : 4 ))}
exec .venv/bin/python -m pytest -q -ra -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
