"""Run the probes in probes/ as child processes and stream their output.

The probes are standalone tools (bpftrace scripts, bcc programs, D scripts); this
module finds them, checks what they need (root, tracefs, a live pid), starts them with
the environment they need on this machine, waits until they are attached, and stops
them with SIGINT (dtrace: SIGTERM) so they print what they have.
"""

from __future__ import annotations

import functools
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from mongoprobe.run.child import ASK_AGAIN, Child, polling

# bpftrace 0.17 symbolises user stacks at print time; on a large Go binary that
# takes minutes of CPU without its symbol cache (BPFTRACE_CACHE_USER_SYMBOLS=1).
# BPFTRACE_STRLEN: mongo_snoop.bt's printf of two strings overflows the 512-byte BPF
# stack at bpftrace 0.17's default of 64 (see its header).
# Each setting under both of its names: bpftrace 0.27 reads only the newer one
# (BPFTRACE_MAX_*), 0.17 only the older; 0.23 takes either (the older last: 48).
# BPFTRACE_MAX_STRLEN is 64: 0.27's stdlib has a 61-byte string and refuses less.
# BPFTRACE_ON_STACK_LIMIT (read by 0.27 only): tuples up to 40 bytes (the wire
# probes' 5-word histogram keys) on the stack; at 0.27's 32 they go to a scratch
# buffer whose field addresses LLVM keeps spilled, past the 512-byte stack.
BPFTRACE_ENV = {"BPFTRACE_CACHE_USER_SYMBOLS": "1",
                "BPFTRACE_STRLEN": "48", "BPFTRACE_MAX_STRLEN": "64",
                "BPFTRACE_ON_STACK_LIMIT": "40"}
# The wire probes' options: no run-time warnings (0.23 and 0.27 report failed map
# updates and reads from the BPF program, at a cost in stack and verified
# instructions 0.27's send programs cannot pay); the probes count their own losses.
BPFTRACE_WIRE_OPTS = ["--no-warnings"]


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
    preallocated), and the largest per-connection map (@slot_cmd, the request slots) holds 4
    keys a connection; never below bpftrace's own default of 4096. (A second's events
    and the target's threads share that limit.)"""
    return bpftrace_map_keys(bpftrace_keys_for(max_connections))


def bpftrace_keys_for(max_connections: int) -> int:
    """The map-key limit for ``max_connections`` (bpftrace_keys)."""
    return max(4096, 4 * max_connections)


def map_memory(pid: int) -> tuple[int, int]:
    """(bytes, maps): the kernel memory of the BPF maps process ``pid`` holds, as the
    kernel accounts it (``memlock`` in /proc/PID/fdinfo; preallocated maps in full,
    BPF_F_NO_PREALLOC ones at their accounting base)."""
    maps = map_entries(pid)
    return sum(m["memlock"] for m in maps), len(maps)


# map types whose max_entries is not the key limit (perf/ring buffers, CPU arrays)
_NOT_KEYED = {4, 27}


def bpftrace_size_mismatch(pid: int, keys: int, env: dict) -> str | None:
    """After bpftrace ``pid`` has loaded: None when its keyed maps got ``keys`` entries,
    else one line saying what it made instead and which variable it was given. bpftrace
    0.27 reads only BPFTRACE_MAX_MAP_KEYS (0.17 only BPFTRACE_MAP_KEYS_MAX), and a
    variable a version does not read leaves every map at its default of 4,096 keys: maps
    that fill, silently. ``env``: the tracer's environment (the variables named)."""
    sizes = [m["max_entries"] for m in map_entries(pid)
             if m["map_type"] not in _NOT_KEYED and m["max_entries"] > 1]
    wrong = sorted({n for n in sizes if n != keys})
    if not wrong:
        return None
    names = " and ".join(f"{k}={v}" for k, v in sorted(env.items())
                         if k in ("BPFTRACE_MAP_KEYS_MAX", "BPFTRACE_MAX_MAP_KEYS"))
    return (f"{tracer_label('bpftrace')} ignored the map size asked: "
            f"{sum(n != keys for n in sizes)} of its {len(sizes)} maps hold "
            f"{', '.join(map(str, wrong))} keys, not {keys}"
            + (f" (given {names})" if names else ""))


def human_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class SlicePrinting:
    """How far a mongo_latency*.bt output has got, for ``Child.stop``: its interval tick
    hands second N over at N + 1.25 s (CLOCK_MONOTONIC, as time.monotonic), but
    bpftrace runs the print() and clear() later, in its own process. Stopped while that
    process is behind (2 s on a loaded machine), bpftrace drops the events it has not
    run at SIGINT: a second's clears lost, END prints that map set again as a later
    second (its counts twice), or a second's counts go missing (both seen on 0.17 and
    0.23). So a stop first waits until every second handed over ``HANDED_OVER`` s ago
    is printed whole: its counters come after its clears."""

    LINE = re.compile(r"@slice (\d+)|# clock monotonic_ns=(\d+)")
    HANDED_OVER = 1.45      # 1.25 s, and two 100 ms ticks late

    def __init__(self) -> None:
        self.begin: int | None = None    # the second of its BEGIN (its first slice)
        self.last: int | None = None     # the last second printed whole
        self._printing: int | None = None

    def seen(self, line: str) -> None:
        head = line[:80]        # (an events map's line is long: only its head is read)
        if '"@no_reply"' in head:
            if self._printing is not None:
                self.last, self._printing = self._printing, None
            return
        if "@slice " not in head and "# clock " not in head:
            return
        m = self.LINE.search(head)
        if m and m[1]:
            self._printing = int(m[1])
        elif m:
            self.begin = int(m[2]) // 1_000_000_000

    def caught_up(self, now: float | None = None) -> bool:
        due = math.floor((time.monotonic() if now is None else now) - self.HANDED_OVER)
        if self.begin is None or due < self.begin:
            return True         # not traced yet, or no second over since
        return self.last is not None and self.last >= due


def slice_progress(argv: list[str]) -> SlicePrinting | None:
    """A ``SlicePrinting`` for a bpftrace command line that runs a probe printing
    seconds (mongo_latency.bt, mongo_latency_tls.bt), else None."""
    return SlicePrinting() if any(Path(a).name in SLICE_SCRIPTS for a in argv) else None


SLICE_SCRIPTS = frozenset({"mongo_latency.bt", "mongo_latency_tls.bt"})


class ProbeError(RuntimeError):
    """A probe could not start or died: the message says why, in one line."""


class TracerFailed(ProbeError):
    """The tracer itself refused the tool (its own error in the message)."""


_PACKAGE = Path(__file__).resolve().parent.parent   # mongoprobe/ (this is run/)
# A checkout runs the package from analyzer/, beside the top-level data folders.
_CHECKOUT = _PACKAGE.parent.parent if _PACKAGE.parent.name == "analyzer" else None


def data_dir(name: str, env: str | None = None) -> Path:
    """The project's folder NAME (probes, dtrace, flamegraphs): $ENV when set, else the
    copy installed with the package (mongoprobe/_data/NAME, setup.py), else the
    checkout's top-level NAME/."""
    if env and os.environ.get(env):
        return Path(os.environ[env])
    installed = _PACKAGE / "_data" / name
    if installed.is_dir():
        return installed
    if _CHECKOUT is not None and (_CHECKOUT / name).is_dir():
        return _CHECKOUT / name
    raise ProbeError(f"no {name}/ folder: neither installed with the package ({installed}) "
                     f"nor beside a checkout{f' (set {env})' if env else ''}")


def probes_dir() -> Path:
    return data_dir("probes", "MONGOPROBE_PROBES")


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


def why_cannot_trace(need_bpftrace: bool = True) -> str | None:
    """None when kernel tracing can run here (with bpftrace, unless not needed), else
    the precise reason."""
    if os.geteuid() != 0:
        return "tracing needs root (the probes attach to kernel tracepoints)"
    tracefs = Path("/sys/kernel/tracing")
    if not tracefs.is_dir() or not any(tracefs.iterdir()):
        return "tracefs is not mounted on /sys/kernel/tracing (run scripts/setup.sh)"
    if need_bpftrace and not shutil.which(bpftrace_binary()):
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


def kernel_headers() -> str | None:
    """Where bcc finds the running kernel's headers, or None. Every bcc from 0.26 to
    0.37 compiles its C against headers: /lib/modules/RELEASE/build, else the
    kernel's own archive (/sys/kernel/kheaders.tar.xz, CONFIG_IKHEADERS, or the
    kheaders module it loads). Kernel BTF (/sys/kernel/btf/vmlinux) does not replace
    them: bcc reads it for relocations only (a vmlinux.h front end is still asked
    for, iovisor/bcc#5290)."""
    release = os.uname().release
    for p in (f"/lib/modules/{release}/build", "/sys/kernel/kheaders.tar.xz"):
        if Path(p).exists():
            return p
    mods = Path(f"/lib/modules/{release}/kernel/kernel")
    found = sorted(mods.glob("kheaders.ko*")) if mods.is_dir() else []
    return str(found[0]) if found else None


def why_cannot_bcc() -> str | None:
    why = why_cannot_trace(need_bpftrace=False)
    if why:
        return why
    if bcc_version() is None:
        return f"{bcc_python()} cannot import bcc (python3-bpfcc; run scripts/setup.sh)"
    if kernel_headers() is None:
        return (f"no kernel headers for bcc to compile against (/lib/modules/"
                f"{os.uname().release}/build, or CONFIG_IKHEADERS; kernel BTF does not "
                "replace them; run scripts/setup.sh)")
    return None


@functools.cache
def bpftrace_version() -> str | None:
    """The version ``bpftrace --version`` prints ("0.17.0"); None when it cannot run."""
    try:
        r = subprocess.run([bpftrace_binary(), "--version"], capture_output=True, text=True,
                           timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"v?(\d+\.\d+\.\d+)", r.stdout + r.stderr)
    return m.group(1) if m else None


def tracer_label(engine: str) -> str:
    """"bpftrace 0.17.0", "bcc 0.26.0", "dtrace Oracle D 2.0 ..." (the engine alone when
    its version is unknown)."""
    v = {"bpftrace": bpftrace_version, "bcc": bcc_version,
         "dtrace": dtrace_version}.get(engine, lambda: None)()
    return f"{engine} {v}" if v else engine


def possible_cpus(text: str | None = None) -> int:
    """The CPUs the kernel sizes per-CPU maps for (/sys/devices/system/cpu/possible,
    "0-63" or "0,2-5"): more than online ones on machines that can hot-plug CPUs."""
    if text is None:
        try:
            text = Path("/sys/devices/system/cpu/possible").read_text()
        except OSError:
            return os.cpu_count() or 1
    n = 0
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        n += int(hi or lo) - int(lo) + 1
    return n


def meminfo(field: str) -> int | None:
    """A field of /proc/meminfo (MemTotal, MemAvailable...) in bytes (None where there
    is none)."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def mem_available() -> int | None:
    """MemAvailable of /proc/meminfo in bytes (None where there is none)."""
    return meminfo("MemAvailable")


def map_entries(pid: int) -> list[dict]:
    """The BPF maps process ``pid`` holds, one dict each (fdinfo's fields: map_type,
    key_size, value_size, max_entries, map_flags, memlock, map_id, as ints)."""
    out, seen = [], set()
    fddir = Path(f"/proc/{pid}/fdinfo")
    for fd in os.listdir(fddir):
        try:
            info = (fddir / fd).read_text()
        except OSError:
            continue
        f = dict(ln.split(":", 1) for ln in info.splitlines() if ":" in ln)
        if "map_type" not in f or f.get("map_id", fd) in seen:
            continue
        seen.add(f.get("map_id", fd))
        out.append({k: int(f[k].strip(), 0) for k in ("map_type", "key_size", "value_size",
                                                      "max_entries", "map_flags", "memlock",
                                                      "map_id") if k in f})
    return out


def dtrace_dir() -> Path:
    """The D scripts (dtrace/ beside probes/)."""
    return data_dir("dtrace", "MONGOPROBE_DTRACE_SCRIPTS")


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


def shared_dir() -> Path | None:
    """The project's shared folder: $MONGOPROBE_SHARED, else ../shared beside the
    checkout; None for an installed package without the variable."""
    env = os.environ.get("MONGOPROBE_SHARED")
    if env:
        return Path(env)
    return _CHECKOUT.parent / "shared" if _CHECKOUT is not None else None


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
            shared = shared_dir()
            kit = shared / "dtrace-linux" if shared else None
            if kit is None or not (kit / "build.sh").exists():
                where = f" at {kit}" if kit else ""
                return (f"no dtrace here, and no shared DTrace kit{where} to build one "
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


_BT_ERROR = re.compile(r"^(?P<where>\S+?:\d+)(?::[\d-]+)*: ERROR: (?P<what>.*)")
_NOISE = ("RLIMIT_MEMLOCK", "WARNING", "deprecated", "Attaching ")


def tracer_error(lines: list[str]) -> str | None:
    """The tracer's own error in one line, from its stderr: bpftrace's first
    ``ERROR:`` (as FILE:LINE: MESSAGE), clang's first ``error:`` (bcc compiling its
    C), the exception a python tool died of, DTrace's ``dtrace: failed ...``; else the
    last line that is not a warning. None when it said nothing."""
    # (bpftrace 0.17 reports the RLIMIT_MEMLOCK it could not raise as an ERROR too)
    lines = [ln for ln in lines if "RLIMIT_MEMLOCK" not in ln]
    for ln in lines:
        m = _BT_ERROR.match(ln.strip())
        if m:
            return f"{m['where']}: {m['what'].strip()}"
        if "ERROR:" in ln:
            return ln.split("ERROR:", 1)[1].strip()
    for ln in lines:
        if ": error: " in ln or ln.startswith(("dtrace: failed", "dtrace: could not",
                                               "dtrace: invalid")):
            return ln.strip()
    exc = [ln for ln in lines if re.match(r"^[\w.]+(Error|Exception)\b", ln)]
    if exc:
        return exc[-1].strip()
    kept = [ln.strip() for ln in lines if ln.strip() and not any(n in ln for n in _NOISE)]
    return kept[-1] if kept else None


def check_pid(pid: int) -> None:
    if not Path(f"/proc/{pid}").exists():
        raise ProbeError(f"no process with pid {pid}")


class Probe(Child):
    """A running probe: ``lines()`` yields its stdout; ``stop()`` ends it with its stop
    signal (SIGINT: bpftrace and the bcc tools print what they have)."""

    def __init__(self, argv: list[str], ready: str, env: dict | None = None,
                 attach_timeout: float = 120.0, stop_signal: int = signal.SIGINT,
                 engine: str | None = None, progress=None):
        self.engine = engine        # bpftrace | bcc | dtrace: named in its errors
        self.name = next((Path(a).name for a in argv if a.endswith((".bt", ".py", ".d"))),
                         argv[0])
        super().__init__(argv, {**os.environ, **(env or {})}, re.compile(re.escape(ready)),
                         stop_signal=stop_signal,
                         ask_again=ASK_AGAIN if engine == "bpftrace" else None,
                         progress=progress)
        state = self.wait_ready(attach_timeout, poll=0.1)
        if state == "exited":
            # (the script's path as the checkout names it: probes/NAME.bt:LINE)
            said = self.error_summary().replace(f"{probes_dir().parent}{os.sep}", "")
            raise TracerFailed(f"{tracer_label(self.engine or argv[0])} cannot run "
                               f"{self.name}: {said}")
        if state == "timeout":
            self.stop()
            said = tracer_error(self.stderr_lines)
            raise ProbeError(f"{self.name} not attached after {attach_timeout:.0f}s"
                             + (f": {said}" if said else ""))
        self.started = time.time()

    def error_summary(self) -> str:
        """The tracer's own error (``tracer_error``), else its exit status."""
        return tracer_error(self.stderr_lines) or f"exit status {self.proc.returncode}"

    def stop(self, timeout: float = 120.0) -> int:
        if super().stop(timeout) and self.argv[0] == dtrace_binary():
            remove_stale_uprobes(self.proc.pid)
        return self.proc.returncode


class Stopper:
    """Stops a child after ``duration`` s, when ``pid`` exits, or at Ctrl-C/SIGTERM.

    ``stop`` is called once, from a thread or the signal handler; ``reason`` says why.
    """

    def __init__(self, stop, alive, duration: float | None, pid: int, again: float = ASK_AGAIN,
                 child: int | None = None, first=None):
        self.stop, self.alive, self.duration, self.pid = stop, alive, duration, pid
        self.first = first or stop  # the first ask (Child.ask_to_end: once caught up)
        self.again = again          # s between asks while the child has not exited
        self.child = child          # its pid: asked again only while it polls
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
        self.first()

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
        # signal was lost (seen once with bpftrace 0.17: it kept tracing), but only while
        # it still waits for events as it did when tracing: a second SIGINT while
        # bpftrace 0.17 prints its maps kills it with nothing printed. Whether it is
        # printing cannot be told by its CPU use: on a loaded machine a printing tracer
        # waits for a CPU or a disk, and an off-CPU profile came out empty that way.
        while self.reason is not None and self.alive():
            time.sleep(self.again)
            if self.alive() and (self.child is None or polling(self.child)):
                self.stop()


def bpftrace(script: str, *args: str | int, env: dict | None = None, **kw) -> Probe:
    """``bpftrace -f json probes/SCRIPT ARGS``, with BPFTRACE_ENV and ``env`` set."""
    path = probe_path(script)
    argv = [bpftrace_binary(), "-f", "json", *BPFTRACE_WIRE_OPTS, str(path), *map(str, args)]
    return Probe(argv, ready="Tracing MongoDB", env={**BPFTRACE_ENV, **(env or {})},
                 engine="bpftrace", progress=slice_progress(argv), **kw)


def bcc(tool: str, *args: str | int, **kw) -> Probe:
    path = probe_path(tool)
    return Probe([bcc_python(), str(path), *map(str, args)], ready="Tracing MongoDB",
                 engine="bcc", **kw)


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
                 stop_signal=signal.SIGTERM, engine="dtrace", **kw)

