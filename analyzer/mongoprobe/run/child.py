"""The one child-process lifecycle, for the tracer runner (``run.tracer.Probe``) and
record's collectors (``run.collectors.Collector``).

A child runs in its own session, so a terminal's Ctrl-C reaches mongoprobe only, which
then stops its children in order (each with the signal that makes it print what it
has). Its stdout goes to a file, flushed line by line, or is kept for ``lines()``; its
stderr is kept (whole, or its first and last lines when it also goes to a file) for the
error it names. It is ready when a line of either stream matches ``ready`` (None: its
first stdout line). ``stop`` waits, if given a ``progress``, until the child's output
has caught up (at most ``CATCH_UP_MAX`` s), sends the stop signal (again, if asked for,
while the child still polls for events: ``polling``), waits, then SIGTERM and SIGKILL,
and reaps it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
import time
from typing import IO, Iterator

ERR_HEAD, ERR_TAIL = 50, 20     # stderr lines kept when it goes to a file as well
KILL_WAIT = 5.0                 # s given to SIGTERM, then to SIGKILL
ASK_AGAIN = 2.0                 # s between asks while a stopped tracer still polls
CATCH_UP_MAX = 5.0              # s a stop waits for a child's output to catch up

# Where a tracer's main thread sleeps between polls of its buffers (the kernel function
# /proc/PID/wchan names, without a ".constprop.0"-like suffix): epoll (bpftrace,
# DTrace, bcc's ring buffers), poll and select (bcc's perf buffers), a sleep (bcc
# tools between slices). Printing maps, reading symbols or waiting for a CPU are not
# among them (a running or runnable task's wchan is 0).
POLLING_WAITS = frozenset({"do_epoll_wait", "ep_poll", "do_sys_poll", "poll_schedule_timeout",
                           "do_select", "core_sys_select", "hrtimer_nanosleep",
                           "do_nanosleep"})


def polling(pid: int, samples: int = 10, every: float = 0.05) -> bool:
    """Whether process ``pid`` still waits for events as a tracer does between polls:
    its main thread in POLLING_WAITS at each of ``samples`` looks ``every`` s apart (a
    tracer at its end may poll once more, briefly). False once it is gone."""
    for i in range(samples):
        if i:
            time.sleep(every)
        try:
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
        except OSError:
            return False
        if wchan.split(".")[0] not in POLLING_WAITS:
            return False
    return True


class Child:
    """A started child process (``proc``, the Popen)."""

    def __init__(self, argv: list[str], env: dict, ready: re.Pattern | None,
                 stdout: IO | None = None, stderr: IO | None = None,
                 stop_signal: int = signal.SIGINT, ask_again: float | None = None,
                 progress=None):
        """``stdout``/``stderr``: files to write to (and close at the end); without
        ``stdout`` the lines are kept for ``lines()``. ``ask_again``: s between asks
        while a stopped child still polls (``stop``), None to ask once (DTrace takes a
        second SIGTERM as "quit now, print nothing"). ``progress``: sees every stdout
        line (``seen(line)``) and says when the output has caught up (``caught_up()``),
        as ``run.tracer.SlicePrinting`` does."""
        self.argv, self.stop_signal, self._ready_re = argv, stop_signal, ready
        self.ask_again = ask_again
        self.progress = progress
        self._stdout, self._stderr = stdout, stderr
        self.stderr_lines: list[str] = []       # all of them, or the first ERR_HEAD
        self._err_tail: list[str] = []          # the last ERR_TAIL, with a file
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = threading.Event()           # stdout has ended
        self._err_done = threading.Event()      # stderr has ended
        self._ready = threading.Event()
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, bufsize=1, env=env,
                                     start_new_session=True)
        self.pid = self.proc.pid
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()

    # --- its output ------------------------------------------------------------------

    def _seen(self, line: str, is_stdout: bool) -> None:
        if self._ready.is_set():
            return
        if self._ready_re.search(line) if self._ready_re is not None else is_stdout:
            self._ready.set()

    def _pump_out(self) -> None:
        try:
            for line in self.proc.stdout:
                self._seen(line, True)
                if self.progress is not None:
                    self.progress.seen(line)
                if self._stdout is not None:
                    self._stdout.write(line)
                    self._stdout.flush()
                else:
                    with self._cond:
                        self._lines.append(line)
                        self._cond.notify_all()
        finally:
            if self._stdout is not None:
                self._stdout.close()
            with self._cond:
                self._eof.set()
                self._cond.notify_all()

    def _pump_err(self) -> None:
        try:
            for line in self.proc.stderr:
                self._seen(line, False)
                text = line.rstrip("\n")
                if self._stderr is None:
                    self.stderr_lines.append(text)
                    continue
                self._stderr.write(line)
                if len(self.stderr_lines) < ERR_HEAD:
                    self.stderr_lines.append(text)
                self._err_tail = (self._err_tail + [text])[-ERR_TAIL:]
        finally:
            if self._stderr is not None:
                self._stderr.close()
            self._err_done.set()

    def said(self) -> list[str]:
        """What it said on stderr: every line, or its first and last with a file."""
        return list(dict.fromkeys(self.stderr_lines + self._err_tail))

    def lines(self) -> Iterator[str]:
        """Every stdout line (when not written to a file), as it comes, until it exits."""
        i = 0
        while True:
            with self._cond:
                while i >= len(self._lines) and not self._eof.is_set():
                    self._cond.wait()
                if i >= len(self._lines) and self._eof.is_set():
                    return
                chunk = self._lines[i:]
            i += len(chunk)
            yield from chunk

    # --- its life ----------------------------------------------------------------------

    def wait_ready(self, timeout: float, poll: float = 0.05) -> str:
        """``ready``, ``exited`` (before it was ready; its output read to the end) or
        ``timeout``."""
        deadline = time.monotonic() + timeout
        while not self._ready.wait(poll):
            if self.proc.poll() is not None:
                self._eof.wait(5)
                self._err_done.wait(5)      # its last stderr lines: the error
                return "ready" if self._ready.is_set() else "exited"
            if time.monotonic() > deadline:
                return "timeout"
        return "ready"

    def signal(self, sig: int) -> None:
        """``sig`` to its process group (safe in a signal handler)."""
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def interrupt(self) -> None:
        """Ask it to print what it has and exit."""
        self.signal(self.stop_signal)

    def ask_to_end(self) -> None:
        """The first ask to end (``interrupt``), once the output has caught up (with a
        ``progress``)."""
        if self.progress is not None:
            self.wait_caught_up()
        self.interrupt()

    def stop(self, timeout: float) -> bool:
        """Ask it to end (the stop signal), wait ``timeout`` s, then SIGTERM and SIGKILL;
        reaped. True when it had to be killed (its output may be cut)."""
        if self.proc.poll() is not None:
            return False
        self.ask_to_end()
        end = time.monotonic() + timeout
        while True:
            try:
                self.proc.wait(max(0.0, min(self.ask_again or timeout,
                                            end - time.monotonic())))
                return False
            except subprocess.TimeoutExpired:
                pass
            if time.monotonic() >= end:
                self.kill()
                return True
            # bpftrace 0.17 loses a signal that lands between two of its polls (it sets a
            # flag only epoll_wait's EINTR looks at): asked again while it still polls,
            # never while it prints (a second SIGINT then kills it).
            if self.ask_again and polling(self.pid):
                self.interrupt()

    def wait_caught_up(self, limit: float = CATCH_UP_MAX) -> bool:
        """Until ``progress`` says the output has caught up, at most ``limit`` s (or the
        child exits): whether it did."""
        end = time.monotonic() + limit
        while not self.progress.caught_up():
            if self.proc.poll() is not None or time.monotonic() >= end:
                return False
            time.sleep(0.05)
        return True

    def kill(self) -> None:
        """SIGTERM, then SIGKILL, KILL_WAIT s each; reaped (unless even SIGKILL could
        not end it in time: a process stuck in the kernel is not waited for)."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is not None:
                return
            self.signal(sig)
            try:
                self.proc.wait(KILL_WAIT)
                return
            except subprocess.TimeoutExpired:
                continue

    def wait_output(self, timeout: float) -> None:
        """Until its stdout has been read to the end (after it exited)."""
        self._eof.wait(timeout)
