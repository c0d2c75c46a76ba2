"""The room the tests of one run share under pytest-xdist (scripts/test.sh): a test
that measures time or CPU (a verdict, a probe's cost, a rate) runs with no other test
running.

Every test holds a shared lock on the "room" file for its setup, call and teardown
(``held``, from conftest.py); a test marked ``serial`` holds it alone for all three. A
fixture that measures and the assertions after it that do not (a recording, then the
analysis of it) take the room alone only while measuring: ``alone()``. A turnstile
lock in front keeps whoever waits to be alone from waiting forever behind a stream of
others.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from pathlib import Path

RUN_MARK = "MONGOPROBE_TEST_RUN"        # the run's mark (conftest.py sets it)

_HELD: list[tuple] = []     # (turnstile, room, alone) of the test this worker runs


def locks() -> tuple[Path, Path]:
    run = os.environ[RUN_MARK]
    d = Path(tempfile.gettempdir())
    return d / f"mongoprobe-tests-{run}.turnstile", d / f"mongoprobe-tests-{run}.room"


@contextlib.contextmanager
def held(alone: bool):
    """The room for one test: shared, or ``alone``."""
    turnstile, room = locks()
    with open(turnstile, "a") as t, open(room, "a") as r:
        fcntl.flock(t, fcntl.LOCK_EX)
        try:
            fcntl.flock(r, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(t, fcntl.LOCK_UN)
        _HELD.append((t, r, alone))
        try:
            yield
        finally:
            _HELD.pop()
            fcntl.flock(r, fcntl.LOCK_UN)
            if alone:
                fcntl.flock(t, fcntl.LOCK_UN)


@contextlib.contextmanager
def alone():
    """Inside a test that holds the room shared: no other test runs until the block
    ends, then the room is shared again. The shared hold is let go before the turnstile
    is taken: two tests waiting to be alone, each still holding it shared, would wait
    on each other. Outside a worker's test (one process, no xdist) there is no one else."""
    if not _HELD or _HELD[-1][2]:
        yield
        return
    t, r, _ = _HELD[-1]
    fcntl.flock(r, fcntl.LOCK_UN)
    fcntl.flock(t, fcntl.LOCK_EX)
    try:
        fcntl.flock(r, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(r, fcntl.LOCK_SH)
    finally:
        fcntl.flock(t, fcntl.LOCK_UN)
