"""Run the probes in probes/ as child processes and stream their output.

The probes are standalone tools (bpftrace scripts, bcc programs); this module finds
them, checks what they need (root, tracefs, a live pid), starts them with the
environment they need on this machine, waits until they are attached, and stops
them with SIGINT so they print what they have.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

# bpftrace 0.17 symbolises user stacks at print time; on a large Go binary that
# takes minutes without its symbol cache (DESIGN: known traps).
# BPFTRACE_STRLEN: mongo_snoop.bt's printf of two strings overflows the 512-byte BPF
# stack at bpftrace 0.17's default of 64 (see its header).
BPFTRACE_ENV = {"BPFTRACE_CACHE_USER_SYMBOLS": "1", "BPFTRACE_STRLEN": "48"}
BCC_PYTHON = "/usr/bin/python3"   # Debian's interpreter, the one python3-bpfcc serves


class ProbeError(RuntimeError):
    """A probe could not start or died: the message says why, in one line."""


def probes_dir() -> Path:
    env = os.environ.get("MONGOPROBE_PROBES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "probes"


def probe_path(name: str) -> Path:
    p = probes_dir() / name
    if not p.exists():
        raise ProbeError(f"{p} not found (set MONGOPROBE_PROBES to the probes/ folder)")
    return p


def why_cannot_trace() -> str | None:
    """None when kernel tracing can run here, else the precise reason."""
    if os.geteuid() != 0:
        return "tracing needs root (the probes attach to kernel tracepoints)"
    tracefs = Path("/sys/kernel/tracing")
    if not tracefs.is_dir() or not any(tracefs.iterdir()):
        return "tracefs is not mounted on /sys/kernel/tracing (run scripts/setup.sh)"
    if not shutil.which("bpftrace"):
        return "bpftrace is not installed (run scripts/setup.sh)"
    return None


def why_cannot_bcc() -> str | None:
    why = why_cannot_trace()
    if why:
        return why
    try:
        r = subprocess.run([BCC_PYTHON, "-c", "import bcc"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{BCC_PYTHON} cannot run: {e}"
    if r.returncode != 0:
        return "python3-bpfcc is not installed for /usr/bin/python3 (run scripts/setup.sh)"
    if not Path(f"/lib/modules/{os.uname().release}/build").exists():
        return f"no kernel headers under /lib/modules/{os.uname().release}/build (run scripts/setup.sh)"
    return None


def check_pid(pid: int) -> None:
    if not Path(f"/proc/{pid}").exists():
        raise ProbeError(f"no process with pid {pid}")


class Probe:
    """A running probe: ``lines()`` yields its stdout; ``stop()`` ends it with SIGINT."""

    def __init__(self, argv: list[str], ready: str, env: dict | None = None,
                 attach_timeout: float = 120.0):
        self.argv = argv
        self.name = next((Path(a).name for a in argv if a.endswith((".bt", ".py"))), argv[0])
        self._ready_text = ready
        self.stderr_lines: list[str] = []
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1,
            env={**os.environ, **(env or {})}, start_new_session=True)
        self._ready = threading.Event()
        self._lines: list[str] = []
        self._cond = threading.Condition()
        self._eof = False
        threading.Thread(target=self._pump_out, daemon=True).start()
        threading.Thread(target=self._pump_err, daemon=True).start()
        deadline = time.monotonic() + attach_timeout
        while not self._ready.wait(0.1):
            if self.proc.poll() is not None and self._eof:
                raise ProbeError(f"{self.name} exited before attaching: {self.error_summary()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ProbeError(f"probe not attached after {attach_timeout:.0f}s")
        self.started = time.time()

    def _pump_out(self) -> None:
        for line in self.proc.stdout:
            if self._ready_text in line:
                self._ready.set()
            with self._cond:
                self._lines.append(line)
                self._cond.notify_all()
        with self._cond:
            self._eof = True
            self._cond.notify_all()

    def _pump_err(self) -> None:
        for line in self.proc.stderr:
            self.stderr_lines.append(line.rstrip("\n"))
            if self._ready_text in line:
                self._ready.set()

    def error_summary(self) -> str:
        # bpftrace's warnings about RLIMIT_MEMLOCK and integer signs are noise here.
        keep = [ln for ln in self.stderr_lines
                if ("ERROR" in ln or "rror" in ln or "Traceback" in ln) and "RLIMIT_MEMLOCK" not in ln]
        return (keep[-1] if keep else (self.stderr_lines[-1] if self.stderr_lines else
                                       f"exit status {self.proc.returncode}")).strip()

    def lines(self) -> Iterator[str]:
        """Every stdout line, as it comes, until the probe exits."""
        i = 0
        while True:
            with self._cond:
                while i >= len(self._lines) and not self._eof:
                    self._cond.wait()
                if i >= len(self._lines) and self._eof:
                    return
                chunk = self._lines[i:]
            i += len(chunk)
            yield from chunk

    def interrupt(self) -> None:
        """Ask the probe to print what it has and exit (safe in a signal handler)."""
        try:
            os.killpg(self.proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass

    def stop(self, timeout: float = 120.0) -> int:
        if self.proc.poll() is None:
            self.interrupt()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        return self.proc.returncode


class Stopper:
    """Stops a child after ``duration`` s, when ``pid`` exits, or at Ctrl-C/SIGTERM.

    ``stop`` is called once, from a thread or the signal handler; ``reason`` says why.
    """

    def __init__(self, stop, alive, duration: float | None, pid: int):
        self.stop, self.alive, self.duration, self.pid = stop, alive, duration, pid
        self.reason: str | None = None
        self.fired_at: float | None = None
        self._lock = threading.RLock()   # a second Ctrl-C runs inside the first
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: self.fire("interrupted"))
        threading.Thread(target=self._run, daemon=True).start()

    def fire(self, reason: str) -> None:
        with self._lock:
            if self.reason is not None:
                return
            self.reason = reason
            self.fired_at = time.monotonic()
        self.stop()

    def _run(self) -> None:
        end = time.monotonic() + self.duration if self.duration else None
        try:
            while self.alive() and self.reason is None:
                if end is not None and time.monotonic() >= end:
                    self.fire("duration")
                    break
                if not os.path.exists(f"/proc/{self.pid}"):
                    self.fire(f"process {self.pid} exited")
                    break
                time.sleep(0.05)
        except BaseException as e:      # never leave the child running unasked
            print(f"mongoprobe: stopping the probe after an error: {e!r}", file=sys.stderr)
            self.fire("error")
        # Once asked, the child prints and exits; ask again now and then in case the
        # signal was lost (seen once with bpftrace 0.17: it kept tracing).
        while self.reason is not None and self.alive():
            time.sleep(5)
            if self.alive():
                self.stop()


def bpftrace(script: str, *args: str | int, **kw) -> Probe:
    path = probe_path(script)
    return Probe(["bpftrace", "-f", "json", str(path), *map(str, args)],
                 ready="Tracing MongoDB", env=BPFTRACE_ENV, **kw)


def bcc(tool: str, *args: str | int, **kw) -> Probe:
    path = probe_path(tool)
    return Probe([BCC_PYTHON, str(path), *map(str, args)], ready="Tracing MongoDB", **kw)


def wall_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now: adds to bpf's nsecs to give wall time."""
    return time.time_ns() - time.monotonic_ns()
