"""Syscalls the wire probes do not decode (recvmmsg/sendmmsg, io_uring) are detected and
said in one line: tests/untraced.c makes a known number of each while
``mongoprobe latency`` traces it.

Needs root, a mounted tracefs, bpftrace or bcc, and a C compiler (skips with the reason).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import build_c

pytestmark = pytest.mark.root

CALLS = 5


@pytest.fixture(scope="module")
def untraced_exe(tmp_path_factory) -> Path:
    return build_c(tmp_path_factory, "untraced", "-O2")


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_mmsg_and_io_uring_are_said_in_one_line(engine, untraced_exe, request):
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    helper = subprocess.Popen([str(untraced_exe), str(CALLS)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert helper.stdout.readline() == "ready\n"
        cli = subprocess.Popen([sys.executable, "-m", "mongoprobe", "latency", "-p",
                                str(helper.pid), "--json", "--engine", engine],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        for line in cli.stderr:        # "Tracing ..." once the probe is attached
            if line.startswith("Tracing MongoDB") or time.monotonic() > deadline:
                break
        helper.stdin.write("go\n")
        helper.stdin.flush()
        assert helper.stdout.readline() == "done\n"
        time.sleep(0.5)
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=120)
        assert cli.returncode == 0, err
    finally:
        helper.stdin.close()
        helper.wait(10)
    result = json.loads(out.strip().splitlines()[-1])
    assert result["untraced"] == {"mmsg_calls": 2 * CALLS, "io_uring_calls": CALLS,
                                  "io_uring_fds": 1, "tls_connections": 0,
                                  "tls_hooked": 0, "tls_calls_without_socket": 0}
    lines = [ln for ln in err.splitlines() if ln.startswith("not traced:")]
    assert lines == [f"not traced: {2 * CALLS} recvmmsg/sendmmsg calls, {CALLS} io_uring_enter "
                     "calls, 1 io_uring instances: the messages they carry are not decoded"]
