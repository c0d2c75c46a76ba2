"""Run the probes in probes/ as child processes and stream their output.

The probes are standalone tools (bpftrace scripts, bcc programs, D scripts); this
module finds them, checks what they need (root, tracefs, a live pid), starts them with
the environment they need on this machine, waits until they are attached, and stops
them with SIGINT (dtrace: SIGTERM) so they print what they have.
"""

from __future__ import annotations

import functools
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
# Each setting under both of its names: bpftrace 0.27 reads only the newer one
# (BPFTRACE_MAX_*), 0.17 only the older; 0.23 takes either.
BPFTRACE_ENV = {"BPFTRACE_CACHE_USER_SYMBOLS": "1",
                "BPFTRACE_STRLEN": "48", "BPFTRACE_MAX_STRLEN": "48"}


def bpftrace_map_keys(n: int) -> dict:
    """The environment that sets bpftrace's map-key limit to ``n``, in every version."""
    return {"BPFTRACE_MAP_KEYS_MAX": str(n), "BPFTRACE_MAX_MAP_KEYS": str(n)}


def bpftrace_binary() -> str:
    """The bpftrace to run: $MONGOPROBE_BPFTRACE (any version, e.g. a wrapper that runs
    one inside a Debian root: scripts/in-root.sh), else ``bpftrace`` on PATH."""
    return os.environ.get("MONGOPROBE_BPFTRACE") or "bpftrace"


def bcc_python() -> str:
    """The python that has bcc: $MONGOPROBE_BCC_PYTHON, else Debian's interpreter, the
    one python3-bpfcc serves."""
    return os.environ.get("MONGOPROBE_BCC_PYTHON") or "/usr/bin/python3"


# Oracle DTrace for Linux as scripts/setup.sh builds it from the shared kit (keep equal
# to DTRACE_COMMIT there): $MONGOPROBE_TOOLS/dtrace-COMMIT/dtrace.
DTRACE_COMMIT = "8a1264bf"


# Connections the wire probes are sized for (--max-connections): every per-connection
# map of every engine is derived from it (bcc: MW_CONNS; bpftrace: the map-key limit,
# 4 request slots a connection; DTrace: dynvarsize and aggsize).
MAX_CONNECTIONS = 10000


def bpftrace_keys(max_connections: int) -> dict:
    """The environment that sizes mongo_latency.bt / mongo_snoop.bt for
    ``max_connections``: bpftrace 0.17 has one key limit for every map (all
    preallocated), and the largest per-connection map (@s, the request slots) holds 4
    keys a connection; never below bpftrace's own default of 4096. (A second's events
    and the target's threads share that limit.)"""
    return bpftrace_map_keys(max(4096, 4 * max_connections))


def map_memory(pid: int) -> tuple[int, int]:
    """(bytes, maps): the kernel memory of the BPF maps process ``pid`` holds, as the
    kernel accounts it (``memlock`` in /proc/PID/fdinfo; preallocated maps in full,
    BPF_F_NO_PREALLOC ones at their accounting base)."""
    total = n = 0
    seen: set[str] = set()
    fddir = Path(f"/proc/{pid}/fdinfo")
    for fd in os.listdir(fddir):
        try:
            info = (fddir / fd).read_text()
        except OSError:
            continue
        fields = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)
        if "map_type" not in fields or "memlock" not in fields:
            continue
        mid = fields.get("map_id", fd).strip()
        if mid in seen:
            continue
        seen.add(mid)
        total += int(fields["memlock"])
        n += 1
    return total, n


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


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


@functools.cache
def _module_at(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def probe_module(name: str):
    """A Python module of the probes' folder, loaded from its file (``tlshooks``,
    ``compressednames``): it lives with the probes because the bcc tools run under
    the system python3, without this package."""
    return _module_at(probe_path(f"{name}.py"))


def why_cannot_trace() -> str | None:
    """None when kernel tracing can run here, else the precise reason."""
    if os.geteuid() != 0:
        return "tracing needs root (the probes attach to kernel tracepoints)"
    tracefs = Path("/sys/kernel/tracing")
    if not tracefs.is_dir() or not any(tracefs.iterdir()):
        return "tracefs is not mounted on /sys/kernel/tracing (run scripts/setup.sh)"
    if not shutil.which(bpftrace_binary()):
        if os.environ.get("MONGOPROBE_BPFTRACE"):
            return f"MONGOPROBE_BPFTRACE={bpftrace_binary()} is not an executable"
        return "bpftrace is not installed (run scripts/setup.sh)"
    return None


@functools.cache
def bcc_version() -> str | None:
    """bcc's version as the bcc python imports it ("0.26.0"); None where it has none."""
    try:
        r = subprocess.run([bcc_python(), "-c", "import bcc; print(bcc.__version__)"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def why_cannot_bcc() -> str | None:
    why = why_cannot_trace()
    if why:
        return why
    try:
        r = subprocess.run([bcc_python(), "-c", "import bcc"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{bcc_python()} cannot run: {e}"
    if r.returncode != 0:
        return f"python3-bpfcc is not installed for {bcc_python()} (run scripts/setup.sh)"
    if not Path(f"/lib/modules/{os.uname().release}/build").exists():
        return f"no kernel headers under /lib/modules/{os.uname().release}/build (run scripts/setup.sh)"
    return None


def dtrace_dir() -> Path:
    """The D scripts (dtrace/ beside probes/)."""
    env = os.environ.get("MONGOPROBE_DTRACE_SCRIPTS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "dtrace"


def tools_dir() -> Path:
    return Path(os.environ.get("MONGOPROBE_TOOLS", Path.home() / ".cache" / "mongoprobe"))


def _reported_version(argv: list[str]) -> str | None:
    """"0.23" from what ``argv`` prints ("bpftrace v0.23.2", "0.31.0"); None if it fails."""
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = r.stdout.split()
    if r.returncode != 0 or not words:
        return None
    return ".".join(words[-1].lstrip("v").split(".")[:2])


def tracer_versions() -> dict[str, dict[str, str]]:
    """Every bpftrace and bcc python on hand, keyed by the version each reports:
    {"bpftrace": {"0.17": "bpftrace", "0.23": ".../bpftrace-trixie"}, "bcc": {...}}.
    The system ones first, then the wrappers $MONGOPROBE_TOOLS/bin/bpftrace-SUITE and
    python3-bcc-SUITE (scripts/tracer-roots.sh builds them); a duplicate version keeps
    the first."""
    found: dict[str, dict[str, str]] = {"bpftrace": {}, "bcc": {}}
    bindir = tools_dir() / "bin"
    candidates = {
        "bpftrace": ["bpftrace", *map(str, sorted(bindir.glob("bpftrace-*")))],
        "bcc": ["/usr/bin/python3", *map(str, sorted(bindir.glob("python3-bcc-*")))],
    }
    for engine, paths in candidates.items():
        for path in paths:
            argv = ([path, "--version"] if engine == "bpftrace" else
                    [path, "-c", "import bcc; print(bcc.__version__)"])
            version = _reported_version(argv)
            if version:
                found[engine].setdefault(version, path)
    by_version = lambda kv: tuple(int(x) for x in kv[0].split(".") if x.isdigit())
    return {engine: dict(sorted(v.items(), key=by_version)) for engine, v in found.items()}


def shared_dir() -> Path:
    """The project's shared folder: $MONGOPROBE_SHARED, else ../shared beside the checkout."""
    env = os.environ.get("MONGOPROBE_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared"


def _is_dtrace(path: str) -> bool:
    # systemtap-sdt-dev installs a `dtrace` that only builds USDT headers: ask it.
    try:
        r = subprocess.run([path, "-V"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return (r.stdout + r.stderr).strip().startswith(("dtrace: Sun D", "dtrace: Oracle D"))


@functools.cache
def dtrace_binary() -> str | None:
    """The dtrace to run: $MONGOPROBE_DTRACE, the one setup built, or a real DTrace on
    PATH (illumos, FreeBSD, macOS, Linux with dtrace-utils); None when there is none."""
    for cand in (os.environ.get("MONGOPROBE_DTRACE"),
                 str(tools_dir() / f"dtrace-{DTRACE_COMMIT}" / "dtrace"),
                 shutil.which("dtrace")):
        if cand and os.access(cand, os.X_OK) and _is_dtrace(cand):
            return cand
    return None


@functools.cache
def dtrace_version() -> str | None:
    """``dtrace -V``'s line ("dtrace: Oracle D 2.0"), with the build's commit when it is
    the one setup built; None without a dtrace."""
    exe = dtrace_binary()
    if exe is None:
        return None
    r = subprocess.run([exe, "-V"], capture_output=True, text=True, timeout=30)
    line = (r.stdout + r.stderr).strip().splitlines()[0].removeprefix("dtrace: ")
    if Path(exe).parent.name == f"dtrace-{DTRACE_COMMIT}":
        line += f" (dtrace-utils {DTRACE_COMMIT})"
    return line


def why_cannot_dtrace() -> str | None:
    """None when the D scripts can run here, else the precise reason."""
    if os.geteuid() != 0:
        return "DTrace needs root"
    if dtrace_binary() is None:
        if sys.platform.startswith("linux"):
            kit = shared_dir() / "dtrace-linux"
            if not (kit / "build.sh").exists():
                return (f"no dtrace here, and no shared DTrace kit at {kit} to build one "
                        "from (MONGOPROBE_SHARED names the shared folder)")
            return (f"no dtrace here: scripts/setup.sh builds it from {kit} into "
                    f"{tools_dir() / f'dtrace-{DTRACE_COMMIT}'}")
        return "no dtrace on PATH (MONGOPROBE_DTRACE names one)"
    if sys.platform.startswith("linux"):
        if not Path("/sys/kernel/debug/tracing").exists():
            return ("debugfs is not mounted on /sys/kernel/debug (Oracle DTrace needs it: "
                    "mount -t debugfs none /sys/kernel/debug, or run scripts/setup.sh)")
        tracefs = Path("/sys/kernel/tracing")
        if not tracefs.is_dir() or not any(tracefs.iterdir()):
            return "tracefs is not mounted on /sys/kernel/tracing (run scripts/setup.sh)"
    return None


def remove_stale_uprobes(dtrace_pid: int) -> int:
    """Oracle DTrace on Linux: a dtrace that was killed (SIGKILL) leaves its
    ``dt_PID_*`` uprobes in tracefs; remove them. Returns how many were removed."""
    events = Path("/sys/kernel/tracing/uprobe_events")
    try:
        lines = events.read_text().splitlines()
    except OSError:
        return 0
    removed = 0
    for line in lines:
        name = line.split()[0].split(":", 1)[-1] if line.strip() else ""
        if name.startswith(f"dt_{dtrace_pid}_"):
            try:
                with open(events, "a") as fh:
                    fh.write(f"-:{name}\n")
                removed += 1
            except OSError:
                pass
    return removed


def check_pid(pid: int) -> None:
    if not Path(f"/proc/{pid}").exists():
        raise ProbeError(f"no process with pid {pid}")


class Probe:
    """A running probe: ``lines()`` yields its stdout; ``stop()`` ends it with SIGINT."""

    def __init__(self, argv: list[str], ready: str, env: dict | None = None,
                 attach_timeout: float = 120.0, stop_signal: int = signal.SIGINT):
        self.argv = argv
        self.name = next((Path(a).name for a in argv if a.endswith((".bt", ".py", ".d"))),
                         argv[0])
        self.stop_signal = stop_signal
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
            os.killpg(self.proc.pid, self.stop_signal)
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
                if self.argv[0] == dtrace_binary():
                    remove_stale_uprobes(self.proc.pid)
        return self.proc.returncode


class Stopper:
    """Stops a child after ``duration`` s, when ``pid`` exits, or at Ctrl-C/SIGTERM.

    ``stop`` is called once, from a thread or the signal handler; ``reason`` says why.
    """

    def __init__(self, stop, alive, duration: float | None, pid: int, again: float = 5.0):
        self.stop, self.alive, self.duration, self.pid = stop, alive, duration, pid
        self.again = again          # s between asks while the child has not exited
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
            time.sleep(self.again)
            if self.alive():
                self.stop()


def bpftrace(script: str, *args: str | int, env: dict | None = None, **kw) -> Probe:
    """``bpftrace -f json probes/SCRIPT ARGS``, with BPFTRACE_ENV and ``env`` set."""
    path = probe_path(script)
    return Probe([bpftrace_binary(), "-f", "json", str(path), *map(str, args)],
                 ready="Tracing MongoDB", env={**BPFTRACE_ENV, **(env or {})}, **kw)


def bcc(tool: str, *args: str | int, **kw) -> Probe:
    path = probe_path(tool)
    return Probe([bcc_python(), str(path), *map(str, args)], ready="Tracing MongoDB", **kw)


def dtrace(script: str, pid: int, *args: str | int, options: tuple[str, ...] = (),
           ready: str = "Hit Ctrl-C", **kw) -> Probe:
    """``dtrace -s dtrace/SCRIPT -p PID [ARGS]``: stopped with SIGTERM (a dtrace started
    in the background ignores SIGINT; SIGTERM still runs END and prints)."""
    exe = dtrace_binary()
    if exe is None:
        raise ProbeError(why_cannot_dtrace() or "no dtrace")
    path = Path(script) if os.path.isabs(script) else dtrace_dir() / script
    if not path.exists():
        raise ProbeError(f"{path} not found (set MONGOPROBE_DTRACE_SCRIPTS to the dtrace/ folder)")
    opts = [a for o in options for a in ("-x", o)]
    return Probe([exe, *opts, "-s", str(path), "-p", str(pid), *map(str, args)], ready=ready,
                 stop_signal=signal.SIGTERM, **kw)


def wall_offset_ns() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC now: adds to bpf's nsecs to give wall time."""
    return time.time_ns() - time.monotonic_ns()
