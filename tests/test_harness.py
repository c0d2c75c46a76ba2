"""The test harness itself: what every other test relies on however the suite was
started (from a terminal, `bash .ci/run &`, nohup)."""

from __future__ import annotations

import signal
import subprocess
import sys

import conftest


def test_children_can_be_stopped_with_sigint():
    """A child started by a test takes SIGINT (Ctrl-C) as a user's tool would, even when
    the suite was started with SIGINT ignored: the tests that stop a tool that way rely
    on it."""
    r = subprocess.run([sys.executable, "-c",
                        "import signal; print(signal.getsignal(signal.SIGINT) is "
                        "signal.default_int_handler)"],
                       capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "True"
    assert signal.getsignal(signal.SIGINT) is not signal.SIG_IGN


def test_session_mark_finds_children():
    """The leftover check finds a child by the session's mark, and only while it runs."""
    import os
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        mark = os.environ[conftest.SESSION_MARK]
        assert child.pid in {pid for pid, _ in conftest._marked_processes(mark)}
    finally:
        child.kill()
        child.wait()
    assert child.pid not in {pid for pid, _ in conftest._marked_processes(mark)}
