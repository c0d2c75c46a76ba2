"""The CLI's Stopper (mongoprobe.run.tracer.Stopper) on real children: it asks a tracer
to end when its duration is up, and asks again a child that lost the signal (it still
sleeps between polls), but never one busy with its end, on a CPU or waiting for one or
for a read: a second SIGINT while bpftrace 0.17 prints its maps kills it with nothing
printed (off-CPU profiles of a busy server came out empty that way)."""

import signal
import subprocess
import sys
import time

import pytest

from mongoprobe.run import tracer

def child(on_sigint: str) -> str:
    """A child that says ready, then idles until its ``on_sigint`` handler ends it."""
    return ("import signal, sys, time\n" + on_sigint
            + "signal.signal(signal.SIGINT, on_sigint)\n"
              "print('ready', flush=True)\n"
              "while True:\n"
              "    time.sleep(0.05)\n")


# like bpftrace 0.17: the first SIGINT starts its end (printing, 1.5 s of CPU here),
# during which the default SIGINT is back and a second one would kill it
BUSY_END = child("""
def on_sigint(*_):
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    t = time.process_time()
    while time.process_time() - t < 1.5:
        pass
    print("printed", flush=True)
    sys.exit(0)
""")

# one whose end waits, using no CPU (for a disk, or for a CPU on a loaded machine): here
# for a line on its stdin, which the test writes after several asking intervals
WAITING_END = child("""
def on_sigint(*_):
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdin.readline()
    print("printed", flush=True)
    sys.exit(0)
""")

# one that loses the first SIGINT and idles on: the second ends it
LOSES_ONE = child("""
asked = []
def on_sigint(*_):
    asked.append(1)
    if len(asked) >= 2:
        print("printed", flush=True)
        sys.exit(0)
""")


@pytest.fixture
def handlers():
    """The Stopper sets this process's SIGINT and SIGTERM handlers: put back after."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def stopped(script: str, stdin_after: float | None = None) -> tuple[int, str]:
    """The child stopped by a Stopper asking every 0.3 s; ``stdin_after``: a line written
    to its stdin that many seconds after it was first asked."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    stopper = tracer.Stopper(lambda: proc.send_signal(signal.SIGINT),
                             lambda: proc.poll() is None, 0.1, proc.pid, again=0.3,
                             child=proc.pid)
    t0 = time.monotonic()
    if stdin_after is not None:
        while stopper.fired_at is None:
            time.sleep(0.01)
        time.sleep(stdin_after)
        if proc.poll() is None:
            proc.stdin.write("go\n")
            proc.stdin.flush()
    out, _ = proc.communicate(timeout=30)
    assert time.monotonic() - t0 < 20
    return proc.returncode, out


def test_a_child_busy_with_its_end_is_not_asked_again(handlers):
    rc, out = stopped(BUSY_END)
    assert (rc, out) == (0, "printed\n")


def test_a_child_waiting_at_its_end_is_not_asked_again(handlers):
    rc, out = stopped(WAITING_END, stdin_after=2.0)
    assert (rc, out) == (0, "printed\n")


def test_a_child_that_lost_the_signal_is_asked_again(handlers):
    rc, out = stopped(LOSES_ONE)
    assert (rc, out) == (0, "printed\n")
