#!/usr/bin/env bash
# test.sh - install what the tests need (idempotent), then run the whole suite.
# USAGE: scripts/test.sh [pytest args...]
#
# The suite runs on a worker per CPU and two more, at most 4 (pytest-xdist, the tests of
# a file on one worker, so that its module fixtures are made once; --dist loadgroup does
# not group on pytest 9.2: pytest-xdist issue 1386), the files handed out longest first
# in the order tests/conftest.py gives (--no-loadscope-reorder). MONGOPROBE_TEST_WORKERS
# sets how many, 0 runs it in this process. Tests marked serial run alone
# (tests/conftest.py).
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
# The extra workers fill the CPUs while other tests wait for a tracer's attach or end,
# and one is free for the quiet tests while the others begin with the serial ones
# (tests/conftest.py). 2 CPUs, fresh clones: 580-630 s with 4 workers (5 runs), 620 s
# with 3 the same day and 589-634 s the day before: within the runs' noise, with the
# CPUs 92-94% busy instead of 86-92%; 893 s with 3 and 958-966 s with 2, an older suite.
workers=${MONGOPROBE_TEST_WORKERS:-$(( $(nproc) < 3 ? $(nproc) + 2 : 4 ))}
exec .venv/bin/python -m pytest -q -ra -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
