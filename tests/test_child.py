"""The one child-process lifecycle (mongoprobe.run.child.Child) the tracer runner and
record's collectors share, on real shell children: ready, exited before ready, stopped
by its signal (printing what it has), asked again when it lost the signal while
polling, killed when it will not stop, stderr kept."""

import os
import re
import signal
import sys
import time

from mongoprobe.run.child import ASK_AGAIN, ERR_HEAD, ERR_TAIL, Child

ENV = dict(os.environ)


def sh(script: str) -> list[str]:
    return ["sh", "-c", script]


def test_ready_on_stdout_then_stopped_by_its_signal(tmp_path) -> None:
    # like bpftrace: a banner, then on SIGINT it prints what it has and exits 0
    c = Child(sh("trap 'echo summary; exit 0' INT; echo 'Tracing... Hit Ctrl-C'; "
                 "while :; do sleep 0.05; done"), ENV, re.compile("Hit Ctrl-C"))
    assert c.wait_ready(30) == "ready"
    assert c.proc.poll() is None
    assert c.stop(30) is False                   # ended on its own signal
    assert c.proc.returncode == 0
    assert list(c.lines()) == ["Tracing... Hit Ctrl-C\n", "summary\n"]


def test_ready_on_stderr_and_stdout_to_a_file(tmp_path) -> None:
    out, err = open(tmp_path / "out", "w"), open(tmp_path / "err", "w")
    c = Child(sh("echo 'Attaching 1 probe...' >&2; echo 'Counting syscalls' >&2; echo one; "
                 "echo two; exec sleep 30"), ENV, re.compile("Counting "),
              stdout=out, stderr=err)
    assert c.wait_ready(30) == "ready"
    assert c.stop(30) is False and c.proc.returncode == -signal.SIGINT
    c.wait_output(10)
    assert (tmp_path / "out").read_text() == "one\ntwo\n" and out.closed
    assert c.said() == ["Attaching 1 probe...", "Counting syscalls"]


def test_ready_at_the_first_stdout_line_without_a_pattern() -> None:
    c = Child(sh("echo warming >&2; sleep 0.3; echo first; exec sleep 30"), ENV, None)
    assert c.wait_ready(30) == "ready"
    assert c.said() == ["warming"]
    c.stop(30)


def test_exited_before_ready_keeps_its_last_words() -> None:
    c = Child(sh("echo 'ERROR: no such pid' >&2; exit 3"), ENV, re.compile("Tracing"))
    assert c.wait_ready(30) == "exited"
    assert c.proc.returncode == 3
    assert c.stderr_lines == ["ERROR: no such pid"]


def test_not_ready_in_time() -> None:
    c = Child(sh("exec sleep 30"), ENV, re.compile("Tracing"))
    assert c.wait_ready(0.3) == "timeout"
    assert c.proc.poll() is None
    c.stop(30)
    assert c.proc.returncode == -signal.SIGINT


def test_one_that_ignores_its_stop_signal_is_killed_and_reaped() -> None:
    # a background dtrace ignores SIGINT: after the wait, SIGTERM (then SIGKILL)
    c = Child(sh("trap '' INT; sleep 30 & echo ready; wait"), ENV, re.compile("ready"))
    assert c.wait_ready(30) == "ready"
    assert c.stop(0.5) is True
    assert c.proc.returncode in (-signal.SIGTERM, -signal.SIGKILL)
    # its process group went with it: the sleep too (once init has reaped it)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.killpg(c.pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process group {c.pid} still alive")


LOSES_ONE = """
import select, signal, sys
asked = []
signal.signal(signal.SIGINT, lambda *_: asked.append(1))
print("Tracing", flush=True)
while len(asked) < 2:           # the first ask lost, as bpftrace 0.17 can lose it
    select.select([], [], [], 0.1)
print(f"summary after {len(asked)} asks", flush=True)
"""


def test_one_that_lost_its_signal_while_polling_is_asked_again() -> None:
    # bpftrace 0.17 sets a flag that only its epoll_wait's EINTR reads: a SIGINT landing
    # between two polls is lost. Still polling after ASK_AGAIN, it is asked again, and
    # ends on its own (not killed) long before the timeout. (Probe asks bpftrace so.)
    c = Child([sys.executable, "-c", LOSES_ONE], ENV, re.compile("Tracing"),
              ask_again=ASK_AGAIN)
    assert c.wait_ready(30) == "ready"
    t0 = time.monotonic()
    assert c.stop(60) is False
    assert c.proc.returncode == 0 and time.monotonic() - t0 < 30
    assert list(c.lines()) == ["Tracing\n", "summary after 2 asks\n"]


def test_its_own_session_keeps_a_terminal_ctrl_c_off_it() -> None:
    c = Child(sh("echo up; exec sleep 30"), ENV, re.compile("up"))
    assert c.wait_ready(30) == "ready"
    assert os.getsid(c.pid) == c.pid != os.getsid(0)
    c.stop(30)


def test_stderr_to_a_file_keeps_its_first_and_last_lines(tmp_path) -> None:
    n = ERR_HEAD + ERR_TAIL + 30
    err = open(tmp_path / "err", "w")
    c = Child([sys.executable, "-c", f"import sys\nfor i in range({n}): print(i, file=sys.stderr)"],
              ENV, None, stderr=err)
    assert c.wait_ready(30) == "exited"
    assert (tmp_path / "err").read_text().split() == [str(i) for i in range(n)]
    assert c.said() == [str(i) for i in range(ERR_HEAD)] + \
        [str(i) for i in range(n - ERR_TAIL, n)]


BEHIND = """
import math, signal, sys, time
stop = []
signal.signal(signal.SIGINT, lambda *_: stop.append(time.monotonic()))
begin = int(time.monotonic()) - 3      # traced for 3 s, its seconds not printed yet
print('{"type": "printf", "data": "# clock monotonic_ns=%d elapsed_ns=1\\\\n"}' % (begin * 10**9),
      flush=True)
print("Tracing", flush=True)
time.sleep(1.0)                        # its userspace behind, as bpftrace on a busy machine
printed, due = None, begin
while not stop:
    while due + 1.25 <= time.monotonic() and not stop:
        print('{"type": "printf", "data": "@slice %d\\\\n"}' % due, flush=True)
        time.sleep(0.05)               # a second's maps, printed
        print('{"type": "map", "data": {"@no_reply": 0}}', flush=True)
        printed, due = due, due + 1
    time.sleep(0.02)
print("stopped %d after %s" % (math.floor(stop[0] - 1.45), printed), flush=True)
"""


def test_a_latency_probe_is_asked_to_end_once_its_seconds_are_printed_whole() -> None:
    # mongo_latency.bt hands each second over at 1.25 s past it, but bpftrace prints and
    # clears it later in its own process, and drops what it has not done at SIGINT:
    # stop waits until every second handed over is printed, its counters (after its
    # clears) included (run.tracer.SlicePrinting)
    from mongoprobe.run.tracer import SlicePrinting
    c = Child([sys.executable, "-c", BEHIND], ENV, re.compile("Tracing"),
              progress=SlicePrinting())
    assert c.wait_ready(30) == "ready"
    assert c.stop(60) is False
    last = list(c.lines())[-1].split()
    due, printed = int(last[1]), int(last[3])
    assert printed >= due
    p = SlicePrinting()
    assert p.caught_up(now=1000.0)                       # not traced yet
    p.seen('{"type": "printf", "data": "# clock monotonic_ns=98000000000 elapsed_ns=1\\n"}')
    assert p.caught_up(now=99.4) and not p.caught_up(now=99.5)
    p.seen('{"type": "printf", "data": "@slice 98\\n"}')
    assert not p.caught_up(now=99.5)                     # printing: its clears to come
    p.seen('{"type": "map", "data": {"@no_reply": 0}}')
    assert p.caught_up(now=100.4) and not p.caught_up(now=100.5)
