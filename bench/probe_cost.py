#!/usr/bin/env python3
"""probe_cost.py - what a latency probe costs the server it traces, measured exactly.

USAGE: .venv/bin/python bench/probe_cost.py [--reps N] [--seconds S] [--threads N]
           [--connections N,N...] [--engines bpftrace,bcc,tshark]
           [--modes hist,events,capture,tls,floor,idle,sock]
           [--targets java,ferretdb,ferretdb-tls] [--no-pin] [--quick] [--json]

For each target, an N-connection find_one-by-_id load (the Java driver,
bench/java's Load) runs in windows of S seconds, and each probe row is attached
through the project's own command line, as a user would:

    bpftrace hist    mongoprobe latency -p PID --engine bpftrace --json
    bpftrace events  ... --engine bpftrace --events FILE
    bcc hist         ... --engine bcc --json
    bcc events       ... --engine bcc --events FILE
    bcc tls          ... --engine bcc --json --tls on   (target ferretdb-tls only)
    tshark capture   mongoprobe capture -o FILE --port PORT   (throughput only)
    bcc floor        bench/tracepoint_floor.py -p PID
    bcc idle         ... --kind idle
    bcc sock         ... --kind sock

The floor row attaches programs that only test the pid and count to the bcc probe's
own tracepoints: its BPF ns per request and its throughput ratio are what the
tracepoint hits cost by themselves, the physical limit of a syscall probe, measured
in the same run as the probes (a probe's work is what it costs above the floor).
Two rows tell its parts apart (not run by default): idle, one syscall tracepoint
that the load never hits (the slower syscall path every task takes while any syscall
tracepoint is attached, alone), and sock, the same pid test and count on the socket
layer's tracepoints (sock_recv_length, sock_send_length) instead of the syscalls'.

Targets: mongo-java-server (memory backend, in-memory and fast: a probe's cost shows
in its throughput) and the embedded FerretDB (hundreds of µs of CPU per request, so
it hardly does). The bench knows the probes by their command line only.
ferretdb-tls is the embedded FerretDB serving TLS only (`target start --tls`), the
Java client trusting its certificate (a PKCS12 trust store made with keytool); only
the `tls` row runs there: the plaintext decoded through uprobes on Go's crypto/tls
(probes/mongo_tls.h), whose BPF ns per request, against the `bcc hist` row on the
plain ferretdb target, is what TLS mode costs. (The syscall rows would see only
ciphertext there.)

Per row and repetition, with the probe attached:
1. a bpf_stats window: the kernel's BPF run-time statistics on for the window only
   (BPF_ENABLE_STATS, an fd the bench holds, so another user of the global
   `kernel.bpf_stats_enabled` on a shared machine neither disturbs the counts nor
   is disturbed; where the kernel refuses it, that sysctl set to 1 and its prior
   value restored after the window and at exit) and `bpftool prog show --json`
   before and after: the deltas of `run_time_ns` and `run_cnt` of the probe's own
   programs, divided by the requests the client served in the window, give the
   BPF ns per request and the programs run per request. The probe's programs are those held by the
   probe's processes (the `prog_id` of their bpf-prog and bpf_link descriptors in
   /proc/PID/fdinfo) that did not exist before it started; `bpftool perf show`
   names where each is attached. Syscall tracepoints run system-wide, so the
   counts include the client's and any other process's syscalls (filtered out
   early by the probe's pid test, but run).
2. a throughput window, without the bench's statistics, paired with a
   no-probe window right before or after it (the order alternates by repetition,
   the rows rotate), so machine drift hits both alike: ratio = probe / no probe.
The probe's own processes' CPU time over the bpf_stats window is shown per request
(`cpu us`: user-space work such as formatting events), and the requests the
probe itself counted over both windows against those the client served (`seen`,
1.00 when the probe saw every request).

Prints medians over repetitions (ratios: median of per-pair ratios, min-max), then
per program where the BPF time goes. Goals (issue 10): BPF µs per request <= 2.0
(bpftrace hist), 1.0 (bcc hist), 4.0 (bpftrace events), 2.0 (bcc events).
`--connections 8,5000` runs everything once per client connection count (the probes'
maps sized as by default, for 10,000 connections) and adds the BPF ns per request
side by side, with the ratio of the last count's to the first's: thousands of
connections' state must not make a request dearer.

The tracers are the project's: $MONGOPROBE_BPFTRACE (the bpftrace to run) and
$MONGOPROBE_BCC_PYTHON (the python with bcc, the floor rows' too) measure any
version; the versions measured are in the output's first line (`config.tracers`).

Needs root, bpftrace (bcc for its rows), bpftool, Java and the bench jar built by
scripts/setup.sh. The server is pinned to CPU 0 and the load to CPU 1 (--no-pin
to leave them free); the probe is not pinned. On 2 cores the three compete: read
ratios and per-request costs, never absolute times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "analyzer"))

from mongoprobe.run import tracer as probes, target as ferretdb  # noqa: E402
from mongoprobe.pcap import capture  # noqa: E402

JAR_NAME = "mongoprobe-bench.jar"
GOAL_NS = {("bpftrace", "hist"): 2000, ("bcc", "hist"): 1000,
           ("bpftrace", "events"): 4000, ("bcc", "events"): 2000}
ENGINES = ("bpftrace", "bcc", "tshark")
MODES = ("hist", "events", "capture", "tls", "floor", "idle", "sock")
FLOORS = ("floor", "idle", "sock")     # bench/tracepoint_floor.py's kinds: bcc rows
ASKED_ONLY = ("idle", "sock")           # rows left out of the default modes
TARGETS = ("java", "ferretdb", "ferretdb-tls")
TLS_TARGETS = ("ferretdb-tls",)     # only the tls row runs there, and only there
STATS_SYSCTL = Path("/proc/sys/kernel/bpf_stats_enabled")
FLOOR = Path(__file__).resolve().parent / "tracepoint_floor.py"


class BenchError(RuntimeError):
    """Something the bench needs failed: the message says what, in one line."""


class ProbeFailed(BenchError):
    """A probe row could not be measured (the others still can)."""


# --- what can run here ----------------------------------------------------------------

def java_hash(top: Path = TOP) -> str:
    """The hash scripts/setup.sh names the built jar by: bench/java's pom.xml and Java
    sources, in byte order of their paths (setup: find | LC_ALL=C sort | xargs cat)."""
    root = top / "bench" / "java"
    files = sorted(p.relative_to(top).as_posix() for p in root.rglob("*")
                   if p.is_file() and (p.name == "pom.xml" or p.suffix == ".java"))
    h = hashlib.sha256()
    for f in files:
        h.update((top / f).read_bytes())
    return h.hexdigest()[:16]


def java_jar() -> Path:
    return ferretdb.tools_dir() / f"bench-java-{java_hash()}" / JAR_NAME


def bpftool() -> str | None:
    return shutil.which("bpftool") or next(
        (p for p in ("/usr/sbin/bpftool", "/sbin/bpftool") if os.access(p, os.X_OK)), None)


def why_cannot_row(engine: str) -> str | None:
    if engine == "bcc":
        return probes.why_cannot_bcc()
    if engine == "tshark":
        return capture.why_cannot_capture()
    return probes.why_cannot_trace()


def why_cannot_target(name: str) -> str | None:
    if name.startswith("ferretdb") and not ferretdb.ferretdb_binary().exists():
        return f"{ferretdb.ferretdb_binary()} not built (run scripts/setup.sh)"
    if name in TLS_TARGETS and not shutil.which("keytool"):
        return "keytool (Java) is needed to make the TLS client's trust store"
    return None


def why_cannot_run(engines=ENGINES[:2], targets=("java",)) -> str | None:
    """None when the bench can run these engines and targets here, else the reason."""
    for e in engines:
        why = why_cannot_row(e)
        if why:
            return why
    if not bpftool():
        return "bpftool is not installed (Debian package bpftool; run scripts/setup.sh)"
    if not STATS_SYSCTL.exists():
        return f"{STATS_SYSCTL} is missing: this kernel cannot count BPF run time"
    if not shutil.which("java"):
        return "java is not installed (run scripts/setup.sh)"
    if not java_jar().exists():
        return f"{java_jar()} not built (run scripts/setup.sh: Maven builds bench/java)"
    for t in targets:
        why = why_cannot_target(t)
        if why:
            return why
    return None


# --- bpf_stats -------------------------------------------------------------------------

# bpf(2) command BPF_ENABLE_STATS (type BPF_STATS_RUN_TIME): the kernel counts run
# time and runs while the returned fd is open, whatever the sysctl says.
BPF_ENABLE_STATS, BPF_STATS_RUN_TIME = 32, 0
NR_BPF = {"x86_64": 321, "aarch64": 280}.get(os.uname().machine)


def enable_stats_fd() -> int | None:
    """An fd holding the kernel's BPF run-time statistics on, or None if refused."""
    if NR_BPF is None:
        return None
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.c_uint64(BPF_STATS_RUN_TIME)      # union bpf_attr { __u32 type; }
    fd = libc.syscall(NR_BPF, BPF_ENABLE_STATS, ctypes.byref(attr), ctypes.sizeof(attr))
    return fd if fd >= 0 else None


class BpfStats:
    """The kernel's BPF run-time statistics, on for a window.

    By BPF_ENABLE_STATS when the kernel allows it: the counting is then this
    process's own (closing the fd, or dying, ends it) and neither touches
    kernel.bpf_stats_enabled nor can be switched off by another user of that
    sysctl on a shared machine. Else by the sysctl, set to 1 for the window and put
    back to its prior value after it (and at exit)."""

    def __init__(self):
        self.prior = STATS_SYSCTL.read_text().strip()
        self.fd: int | None = None
        probe = enable_stats_fd()
        self.via = "sysctl" if probe is None else "BPF_ENABLE_STATS"
        if probe is not None:
            os.close(probe)

    def on(self) -> None:
        if self.via == "sysctl":
            STATS_SYSCTL.write_text("1\n")
        elif self.fd is None:
            self.fd = enable_stats_fd()
            if self.fd is None:
                raise BenchError("BPF_ENABLE_STATS refused (it worked at start)")

    def off(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.via == "sysctl":
            STATS_SYSCTL.write_text(self.prior + "\n")

    def still_on(self) -> bool:
        return self.via != "sysctl" or STATS_SYSCTL.read_text().strip() == "1"


def bpftrace_version() -> str | None:
    """`bpftrace --version` of the bpftrace the rows run ("v0.17.0"), None if none"""
    try:
        r = subprocess.run([probes.bpftrace_binary(), "--version"], capture_output=True,
                           text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = r.stdout.split()
    return out[-1] if r.returncode == 0 and out else None


def tracers(engines) -> dict:
    """what the rows run: {"bcc": {"python", "version"}, "bpftrace": {"binary", "version"}},
    for the engines asked"""
    out = {}
    if "bcc" in engines:
        out["bcc"] = {"python": probes.bcc_python(), "version": probes.bcc_version()}
    if "bpftrace" in engines:
        out["bpftrace"] = {"binary": probes.bpftrace_binary(), "version": bpftrace_version()}
    return out


def bpftool_json(*args: str) -> list:
    r = subprocess.run([bpftool(), *args, "--json"], capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise BenchError(f"bpftool {' '.join(args)}: {r.stderr.strip() or r.returncode}")
    return json.loads(r.stdout or "[]")


def prog_counters(ids: set[int]) -> dict[int, tuple[int, int]]:
    """{prog id: (run_cnt, run_time_ns)} now (bpftool leaves out counters still 0)."""
    return {p["id"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0))
            for p in bpftool_json("prog", "show") if p["id"] in ids}


def start_time(pid: int) -> int | None:
    """When the process started (clock ticks since boot): with the pid, its identity."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def process_tree(root: int) -> set[int]:
    """root and its descendants, from /proc/*/stat."""
    parent: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    parent[int(d)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    tree, grew = {root}, True
    while grew:
        new = {p for p, pp in parent.items() if pp in tree} - tree
        tree |= new
        grew = bool(new)
    return tree


def held_programs(pids: set[int]) -> set[int]:
    """Ids of the BPF programs these processes hold (bpf-prog and bpf_link fds)."""
    ids = set()
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link not in ("anon_inode:bpf-prog", "anon_inode:bpf_link"):
                    continue
                with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                    m = re.search(r"^prog_id:\s*(\d+)", f.read(), re.M)
            except OSError:
                continue
            if m:
                ids.add(int(m.group(1)))
    return ids


def program_labels(ids: set[int]) -> dict[int, tuple[str, list[str]]]:
    """prog id -> (label, what it is attached to): the label names the attach points
    (bpftool perf: tracepoints, u/kprobes; one program may serve several, as
    mongo_wire.h's do), else the program's name and type."""
    names = {p["id"]: f"{p.get('name', '?')} ({p.get('type', '?')})"
             for p in bpftool_json("prog", "show") if p["id"] in ids}
    points: dict[int, list[str]] = {}
    for a in bpftool_json("perf", "show"):
        pid = a.get("prog_id")
        if pid not in ids:
            continue
        if a.get("tracepoint"):
            points.setdefault(pid, []).append(a["tracepoint"])
        elif a.get("filename"):
            points.setdefault(pid, []).append(
                f"{a.get('fd_type')} {Path(a['filename']).name}+{a.get('offset', 0):#x}")
        elif a.get("func"):
            points.setdefault(pid, []).append(f"{a.get('fd_type')} {a['func']}")
    out = {}
    for i, name in names.items():
        where = sorted(set(points.get(i, [])))
        out[i] = (braced(where) if where else name, where)
    return out


def braced(names: list[str]) -> str:
    """Several names as one: sys_exit_{read,readv} for sys_exit_read, sys_exit_readv;
    more than four (a Go function's return instructions), the first and a count."""
    if len(names) == 1:
        return names[0]
    if len(names) > 4:
        return f"{names[0]} +{len(names) - 1} more"
    stem = os.path.commonprefix(names)
    stem = stem[:stem.rfind("_") + 1] if "_" in stem else stem
    return stem + "{" + ",".join(n[len(stem):] for n in names) + "}"


def cpu_ticks(pids: set[int]) -> int:
    """utime + stime of these processes, in clock ticks."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total


# --- processes the bench starts ------------------------------------------------------------

def pinned(cpu: int | None):
    if cpu is None or (os.cpu_count() or 1) < 2:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def pin_tasks(pid: int, cpu: int | None) -> None:
    """Pin every thread of an already running process (new threads inherit it)."""
    if cpu is None or (os.cpu_count() or 1) < 2:
        return
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(task), {cpu})
        except OSError:
            pass


def stop_process(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = 30) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def read_json_line(proc: subprocess.Popen, what: str, timeout: float) -> dict:
    """The next JSON line a child prints on stdout, within timeout seconds."""
    box: list = []
    t = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
    t.start()
    t.join(timeout)
    if not box:
        raise BenchError(f"{what}: no answer within {timeout:.0f}s")
    line = box[0]
    if not line:
        raise BenchError(f"{what} exited (status {proc.wait()}): {_tail(proc)}")
    try:
        return json.loads(line)
    except ValueError:
        raise BenchError(f"{what} printed {line.strip()[:100]!r}, not JSON")


def _tail(proc: subprocess.Popen) -> str:
    err = getattr(proc, "err_lines", None)
    return err[-1] if err else "no message"


def _pump_stderr(proc: subprocess.Popen) -> None:
    proc.err_lines = []
    threading.Thread(target=lambda: [proc.err_lines.append(ln.rstrip("\n"))
                                     for ln in proc.stderr], daemon=True).start()


@dataclass
class Target:
    name: str
    pid: int
    uri: str
    port: int
    close: Callable[[], None]
    jvm: list[str] = field(default_factory=list)    # the load client's JVM options


def java_target(cpu: int | None) -> Target:
    proc = subprocess.Popen(["java", "-cp", str(java_jar()), "mongoprobe.bench.Server"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=pinned(cpu))
    _pump_stderr(proc)
    try:
        info = read_json_line(proc, "mongo-java-server", 60)
    except BenchError:
        stop_process(proc)
        raise
    return Target("java", info["pid"], f"mongodb://127.0.0.1:{info['port']}/", info["port"],
                  lambda: stop_process(proc))


def ferretdb_target(cpu: int | None, tmp: str, tls: bool = False) -> Target:
    name = "ferretdb-tls" if tls else "ferretdb"
    state = Path(tmp) / name
    info = ferretdb.start(state, tls=tls)
    pin_tasks(info.pid, cpu)
    uri = info.uri
    jvm: list[str] = []
    if tls:
        # the Java driver takes no tlsCAFile: the JVM trusts the certificate through a
        # trust store of its own
        store = Path(tmp) / "truststore.p12"
        store.unlink(missing_ok=True)
        r = subprocess.run(["keytool", "-importcert", "-noprompt", "-alias", "ferretdb",
                            "-file", str(info.ca_file), "-keystore", str(store),
                            "-storetype", "PKCS12", "-storepass", "changeit"],
                           capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            ferretdb.stop(state)
            raise BenchError(f"keytool: {(r.stderr or r.stdout).strip()}")
        uri = f"mongodb://127.0.0.1:{info.port}/?tls=true"
        jvm = [f"-Djavax.net.ssl.trustStore={store}", "-Djavax.net.ssl.trustStoreType=PKCS12",
               "-Djavax.net.ssl.trustStorePassword=changeit"]
    return Target(name, info.pid, uri, info.port, lambda: ferretdb.stop(state), jvm)


class LoadClient:
    """bench/java's Load in --serve mode: connections open, documents inserted, warm."""

    def __init__(self, uri: str, threads: int, cpu: int | None, jvm: list[str] = ()):
        self.proc = subprocess.Popen(
            ["java", *jvm, "-cp", str(java_jar()), "mongoprobe.bench.Load", "--uri", uri,
             "--threads", str(threads), "--serve"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, preexec_fn=pinned(cpu))
        _pump_stderr(self.proc)
        try:
            read_json_line(self.proc, "the load client", 120)
        except BenchError:
            self.close()
            raise

    def run(self, seconds: float) -> dict:
        try:
            self.proc.stdin.write(f"run {seconds}\n")
            self.proc.stdin.flush()
        except OSError:
            raise BenchError(f"the load client exited (status {self.proc.wait()}): "
                             f"{_tail(self.proc)}")
        r = read_json_line(self.proc, "the load client", seconds + 120)
        if r.get("errors"):
            raise BenchError(f"the load client saw {r['errors']} errors: {_tail(self.proc)}")
        if not r.get("requests"):
            raise BenchError("the load client served no request")
        return r

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        stop_process(self.proc, timeout=30)


@dataclass(frozen=True)
class Row:
    engine: str
    mode: str

    @property
    def label(self) -> str:
        return f"{self.engine} {self.mode}"

    def argv(self, t: Target, tmp: str) -> list[str]:
        """The command for this row: the user's (`python -m mongoprobe ...`), or the
        floor's tool."""
        if self.mode in FLOORS:
            kind = "probe" if self.mode == "floor" else self.mode
            return [probes.bcc_python(), str(FLOOR), "-p", str(t.pid), "--kind", kind]
        mp = [sys.executable, "-m", "mongoprobe"]
        if self.engine == "tshark":
            return [*mp, "capture", "-o", os.path.join(tmp, "cap.pcapng"),
                    "--port", str(t.port)]
        argv = [*mp, "latency", "-p", str(t.pid), "--engine", self.engine, "--json"]
        if self.mode == "events":
            argv += ["--events", os.path.join(tmp, "events.jsonl")]
        if self.mode == "tls":
            argv += ["--tls", "on"]
        return argv

    def runs_on(self, target: str) -> bool:
        """tls rows on the TLS targets, the others elsewhere"""
        return (self.mode == "tls") == (target in TLS_TARGETS)


def valid_rows(engines, modes) -> list[Row]:
    # tshark goes with capture; tls is bcc's (bpftrace 0.17 cannot place Go's RET
    # probes: probes/README.md); the floors are bcc programs
    return [Row(e, m) for e in engines for m in modes
            if (e == "tshark") == (m == "capture") and (m not in ("tls", *FLOORS) or e == "bcc")]


class AttachedProbe:
    """ARGV (`python -m mongoprobe ...` with this checkout's package, or the floor's
    tool), attached when it says so on stderr; stop() interrupts it as Ctrl-C would
    and returns its stdout."""

    READY = re.compile(r"^(Tracing|Capturing TCP)")

    def __init__(self, argv: list[str], timeout: float = 300):
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [str(TOP / "analyzer"), *filter(None, [env.get("PYTHONPATH")])])
        # SIGINT back to its default in the child: a bench started in the background
        # (`cmd &` from a script) has it ignored, the child would inherit that, and
        # a command relying on the default KeyboardInterrupt would never stop.
        self.proc = subprocess.Popen(argv,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, env=env,
                                     start_new_session=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT,
                                                                      signal.SIG_DFL))
        self.argv = argv
        self.name = argv[3] if argv[1:3] == ["-m", "mongoprobe"] else Path(argv[1]).name
        self.err_lines: list[str] = []
        self.out: list[str] = []
        ready = threading.Event()

        def pump_err():
            for ln in self.proc.stderr:
                self.err_lines.append(ln.rstrip("\n"))
                if self.READY.match(ln):
                    ready.set()

        threading.Thread(target=pump_err, daemon=True).start()
        threading.Thread(target=lambda: self.out.extend(self.proc.stdout), daemon=True).start()
        deadline = time.monotonic() + timeout
        while not ready.wait(0.1):
            if self.proc.poll() is not None:
                time.sleep(0.2)       # let the last stderr lines in
                raise ProbeFailed(f"{self.name} exited before attaching: "
                                 f"{self.error()}")
            if time.monotonic() > deadline:
                self.stop()
                raise ProbeFailed(f"{self.name} not attached after {timeout:.0f}s")

    def error(self) -> str:
        keep = [ln for ln in self.err_lines if "RLIMIT_MEMLOCK" not in ln]
        return keep[-1] if keep else f"exit status {self.proc.returncode}"

    def pids(self) -> set[int]:
        return process_tree(self.proc.pid)

    def stop(self, timeout: float = 120) -> str:
        children = {p: start_time(p) for p in self.pids() - {self.proc.pid}}
        stop_process(self.proc, signal.SIGINT, timeout)
        time.sleep(0.2)
        # A child left behind (the tracer runs in a session of its own) when the
        # command had to be killed: end it, if that pid is still the same process.
        for pid, started in children.items():
            if started is not None and start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        return "".join(self.out)


# --- one target ------------------------------------------------------------------------

@dataclass
class RowResult:
    row: Row
    stats: list[dict] = field(default_factory=list)     # per bpf_stats window
    pairs: list[dict] = field(default_factory=list)     # per throughput pair
    errors: list[str] = field(default_factory=list)     # per failed repetition


def measure_row(row: Row, t: Target, load: LoadClient, stats: BpfStats, seconds: float,
                none_first: bool, tmp: str, log) -> tuple[dict | None, dict]:
    """Attach, one bpf_stats window, one throughput window, detach; the paired
    no-probe window before or after. Returns (stats window, pair)."""
    none = load.run(seconds) if none_first else None
    before = {p["id"] for p in bpftool_json("prog", "show")}
    probe = AttachedProbe(row.argv(t, tmp))
    try:
        pids = probe.pids()
        ids = held_programs(pids) - before
        if row.engine != "tshark" and not ids:
            raise ProbeFailed("no BPF program held by the probe's processes")
        labels = program_labels(ids)
        window = None
        if row.engine != "tshark":
            stats.on()
            try:
                c0, cpu0 = prog_counters(ids), cpu_ticks(pids)
                r = load.run(seconds)
                c1, cpu1 = prog_counters(ids), cpu_ticks(pids)
                if not stats.still_on():
                    raise ProbeFailed("kernel.bpf_stats_enabled was turned off during the "
                                     "window (by another process): counts incomplete")
            finally:
                stats.off()
            progs = []
            for i in sorted(ids):
                n0, t0 = c0.get(i, (0, 0))
                n1, t1 = c1.get(i, (0, 0))
                name, points = labels.get(i, ("?", []))
                progs.append({"id": i, "name": name, "attached": points,
                              "run_cnt": n1 - n0, "run_time_ns": t1 - t0})
            window = {"requests": r["requests"], "seconds": r["seconds"],
                      "run_cnt": sum(p["run_cnt"] for p in progs),
                      "run_time_ns": sum(p["run_time_ns"] for p in progs),
                      "probe_cpu_s": (cpu1 - cpu0) / os.sysconf("SC_CLK_TCK"),
                      "programs": progs}
            window["ns_per_request"] = window["run_time_ns"] / r["requests"]
            window["runs_per_request"] = window["run_cnt"] / r["requests"]
        with_probe = load.run(seconds)
    finally:
        out = probe.stop()
    if probe.proc.returncode not in (0, None):
        raise ProbeFailed(f"{probe.name} exited with status "
                          f"{probe.proc.returncode}: {probe.error()}")
    if none is None:
        none = load.run(seconds)
    pair = {"ops_per_s": with_probe["ops_per_s"], "none_ops_per_s": none["ops_per_s"],
            "ratio": with_probe["ops_per_s"] / none["ops_per_s"]}
    served = (window["requests"] if window else 0) + with_probe["requests"]
    seen = probe_count(out, "find")
    if window is not None:
        window["seen"] = None if seen is None else seen / served
    log(f"{t.name:8s} {row.label:15s} "
        + (f"{window['ns_per_request']:8.0f} ns/req {window['runs_per_request']:6.2f} runs/req  "
           if window else "")
        + f"ratio {pair['ratio']:.3f} ({pair['ops_per_s']:.0f}/{pair['none_ops_per_s']:.0f} ops/s)")
    return window, pair


def probe_count(out: str, command: str) -> int | None:
    """Requests of this command the probe counted (its --json summary), if it printed one."""
    for line in reversed(out.splitlines()):
        if line.startswith("{"):
            try:
                d = json.loads(line)
            except ValueError:
                return None
            n = d.get("requests_by_command", {}).get(command)
            if n is None:
                n = d.get("by_command", {}).get(command, {}).get("count")
            return n
    return None


def warm_up(load: LoadClient, limit: float, log, name: str) -> None:
    """Run 2 s windows until the rate stops rising (the JIT of a Java server takes
    some 15 s to settle here): two windows in a row not 3% above the best before,
    or ``limit`` seconds."""
    best, flat, spent = 0.0, 0, 0.0
    while spent < limit and flat < 2:
        r = load.run(min(2.0, limit - spent))
        spent += r["seconds"]
        flat = flat + 1 if r["ops_per_s"] < best * 1.03 else 0
        best = max(best, r["ops_per_s"])
    log(f"{name:8s} warmed up for {spent:.0f} s: {best:,.0f} ops/s")


def run_target(name: str, rows: list[Row], a, stats: BpfStats, tmp: str, log) -> list[RowResult]:
    cpu_server, cpu_load = (None, None) if a.no_pin else (0, 1)
    rows = [r for r in rows if r.runs_on(name)]
    if not rows:
        return []
    t = (java_target(cpu_server) if name == "java"
         else ferretdb_target(cpu_server, tmp, tls=name in TLS_TARGETS))
    results = {r: RowResult(r) for r in rows}
    try:
        load = LoadClient(t.uri, a.threads, cpu_load, t.jvm)
        try:
            warm_up(load, a.warmup, log, t.name)
            for rep in range(a.reps):
                k = rep % len(rows)
                for row in rows[k:] + rows[:k]:        # rotate: drift favours no row
                    try:
                        window, pair = measure_row(row, t, load, stats, a.seconds,
                                                   none_first=rep % 2 == 0, tmp=tmp, log=log)
                    except ProbeFailed as e:
                        log(f"{t.name:8s} {row.label:15s} failed: {e}")
                        results[row].errors.append(str(e))
                        continue
                    if window:
                        results[row].stats.append(window)
                    results[row].pairs.append(pair)
        finally:
            load.close()
    finally:
        t.close()
    return list(results.values())


# --- summary ---------------------------------------------------------------------------

def summarize(target: str, res: RowResult) -> dict:
    ratios = [p["ratio"] for p in res.pairs]
    d = {"target": target, "engine": res.row.engine, "mode": res.row.mode,
         "throughput": None, "bpf": None, "errors": res.errors,
         "goal_ns_per_request": GOAL_NS.get((res.row.engine, res.row.mode))}
    if ratios:
        d["throughput"] = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios),
                           "ratio_max": max(ratios), "ratios": ratios,
                           "ops_per_s": [p["ops_per_s"] for p in res.pairs],
                           "none_ops_per_s": [p["none_ops_per_s"] for p in res.pairs]}
    if res.stats:
        w = res.stats
        ns = [x["ns_per_request"] for x in w]
        req = sum(x["requests"] for x in w)
        progs: dict[str, dict] = {}
        for x in w:
            for p in x["programs"]:
                q = progs.setdefault(p["name"], {"name": p["name"], "attached": p["attached"],
                                                 "run_cnt": 0, "run_time_ns": 0})
                q["run_cnt"] += p["run_cnt"]
                q["run_time_ns"] += p["run_time_ns"]
        for q in progs.values():
            q["runs_per_request"] = q["run_cnt"] / req
            q["ns_per_call"] = q["run_time_ns"] / q["run_cnt"] if q["run_cnt"] else None
            q["ns_per_request"] = q["run_time_ns"] / req
        seen = [x["seen"] for x in w if x.get("seen") is not None]
        d["bpf"] = {
            "ns_per_request": statistics.median(ns), "ns_per_request_min": min(ns),
            "ns_per_request_max": max(ns),
            "runs_per_request": statistics.median(x["runs_per_request"] for x in w),
            "requests": req,
            "probe_cpu_us_per_request": statistics.median(
                x["probe_cpu_s"] * 1e6 / x["requests"] for x in w),
            "seen": statistics.median(seen) if seen else None,
            "programs": sorted(progs.values(), key=lambda q: -q["run_time_ns"]),
            "windows": w}
    return d


def render(report: dict) -> str:
    c = report["config"]
    counts = c.get("connections") or [c["threads"]]
    versions = ", ".join(f"{e} {t['version'] or '?'}"
                         for e, t in sorted(c.get("tracers", {}).items()))
    out = [f"probe cost: find_one by _id, {'/'.join(map(str, counts))} connections "
           f"(Java driver), {c['reps']} x {c['seconds']:g} s",
           *([f"tracers: {versions}"] if versions else []),
           "ns/req: BPF run time per request served (bpf_stats); runs: programs run",
           "per request; cpu us: the probe's own processes per request; seen: requests",
           "the probe counted / served; ratio: ops/s with / without the probe;",
           "bcc floor: the same tracepoints, programs that only test the pid",
           *(["bcc idle: a syscall tracepoint nothing hits; sock: socket tracepoints"]
             if any(r["mode"] in ASKED_ONLY for r in report["rows"]) else []),
           "",
           f"{'target':9s}{'probe':16s}{'ns/req':>7s}{'goal':>6s}{'runs':>7s}"
           f"{'cpu us':>8s}{'seen':>6s}  ratio (min-max)"]
    shown = None
    for r in report["rows"]:
        b = r["bpf"]
        th = r["throughput"]
        goal = r["goal_ns_per_request"]
        if b:
            seen = f"{b['seen']:6.2f}" if b["seen"] is not None else f"{'-':>6s}"
            cols = (f"{b['ns_per_request']:7.0f}{goal if goal else '-':>6}"
                    f"{b['runs_per_request']:7.2f}{b['probe_cpu_us_per_request']:8.2f}{seen}")
        else:
            cols = f"{'-':>7s}{'-':>6s}{'-':>7s}{'-':>8s}{'-':>6s}"
        ratio = (f"{th['ratio_median']:.3f} ({th['ratio_min']:.2f}-{th['ratio_max']:.2f})"
                 if th else "-")
        if len(counts) > 1 and r.get("connections") != shown:
            shown = r.get("connections")
            out.append(f"-- {shown} connections")
        # the tls row runs on ferretdb-tls only: "ferretdb  bcc tls" names it within
        # 80 columns
        shown_target = r["target"].removesuffix("-tls")
        out.append(f"{shown_target:9s}{r['engine'] + ' ' + r['mode']:16s}{cols}  {ratio}")
        for e in dict.fromkeys(r["errors"]):
            out.append(f"  failed {r['errors'].count(e)} of {c['reps']}: {e}"[:79])
    none = ", ".join(f"{t} {v:,.0f}" for t, v in report["none_ops_per_s"].items()
                     if v is not None)
    out.append(f"no probe, ops/s (median): {none}")
    if len(counts) > 1:
        out += ["", "BPF ns per request by client connections (ratio: "
                    f"{counts[-1]} / {counts[0]})",
                f"  {'target':9s}{'probe':16s}"
                + "".join(f"{n:>8d}" for n in counts) + f"{'ratio':>8s}"]
        for key in dict.fromkeys((r["target"], r["engine"], r["mode"]) for r in report["rows"]):
            ns = {r["connections"]: r["bpf"]["ns_per_request"] for r in report["rows"]
                  if (r["target"], r["engine"], r["mode"]) == key and r["bpf"]}
            cells = "".join(f"{ns[n]:8.0f}" if n in ns else f"{'-':>8s}" for n in counts)
            ratio = (f"{ns[counts[-1]] / ns[counts[0]]:8.2f}"
                     if counts[0] in ns and counts[-1] in ns else f"{'-':>8s}")
            out.append(f"  {key[0]:9s}{key[1] + ' ' + key[2]:16s}{cells}{ratio}")
    for r in report["rows"]:
        if not r["bpf"] or not r["bpf"]["runs_per_request"]:    # idle: nothing ran
            continue
        w = max([28] + [len(q["name"]) + 1 for q in r["bpf"]["programs"] if q["run_cnt"]])
        out += ["", f"where the BPF time goes: {r['target']}, {r['engine']} {r['mode']} "
                    f"({r['bpf']['requests']:,} requests)",
                f"  {'program (attached to)':{w}s}{'runs/req':>9s}{'ns/call':>9s}"
                f"{'ns/req':>9s}{'share':>7s}"]
        total = sum(q["run_time_ns"] for q in r["bpf"]["programs"]) or 1
        small = []
        for q in r["bpf"]["programs"]:
            if not q["run_cnt"]:
                continue
            if q["run_time_ns"] < total / 200:      # under 0.5%: summed on one line
                small.append(q)
                continue
            out.append(f"  {q['name']:{w}s}{q['runs_per_request']:9.2f}"
                       f"{q['ns_per_call']:9.0f}{q['ns_per_request']:9.0f}"
                       f"{100 * q['run_time_ns'] / total:6.1f}%")
        if small:
            out.append(f"  {f'{len(small)} more, each under 0.5%':{w}s}"
                       f"{sum(q['runs_per_request'] for q in small):9.2f}{'':9s}"
                       f"{sum(q['ns_per_request'] for q in small):9.0f}"
                       f"{100 * sum(q['run_time_ns'] for q in small) / total:6.1f}%")
    return "\n".join(out) + "\n"


# --- main ------------------------------------------------------------------------------

def csv(choices):
    def parse(s: str) -> list[str]:
        items = [x for x in s.split(",") if x]
        bad = [x for x in items if x not in choices]
        if bad or not items:
            raise argparse.ArgumentTypeError(f"choose from {','.join(choices)}")
        return items
    return parse


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n"
                                 "  probe_cost.py                       # every row, 3 reps of 5 s\n"
                                 "  probe_cost.py --engines bcc --targets java --json\n"
                                 "  probe_cost.py --quick --engines bpftrace --modes hist  # smoke\n")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (pairs) per row")
    ap.add_argument("--seconds", type=float, default=5.0, help="length of each window")
    ap.add_argument("--threads", type=int, default=8, help="client connections")
    ap.add_argument("--connections", type=lambda s: [int(x) for x in s.split(",") if x],
                    metavar="N,N...",
                    help="run once per client connection count (overrides --threads) "
                         "and compare the BPF ns per request")
    ap.add_argument("--warmup", type=float, default=40.0,
                    help="at most SEC of warm-up per target, until the rate settles")
    ap.add_argument("--engines", type=csv(ENGINES),
                    help="comma-separated, of bpftrace,bcc,tshark (default: those that "
                         "can run here)")
    ap.add_argument("--modes", type=csv(MODES),
                    help="comma-separated, of hist,events (bpftrace, bcc), capture "
                         "(tshark), tls (bcc, target ferretdb-tls), floor, idle and "
                         "sock (bcc); default all but idle and sock")
    ap.add_argument("--targets", type=csv(TARGETS), default=list(TARGETS),
                    help="comma-separated, of java (mongo-java-server), ferretdb, "
                         "ferretdb-tls; default all")
    ap.add_argument("--no-pin", action="store_true", help="leave server and load unpinned")
    ap.add_argument("--quick", action="store_true", help="one short rep (a smoke test)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    a = ap.parse_args(argv)
    if a.quick:
        a.reps, a.seconds, a.warmup = 1, 1.0, min(a.warmup, 4.0)
    counts = a.connections or [a.threads]
    a.threads = counts[0]
    if a.reps < 1 or a.seconds <= 0 or min(counts) < 1 or a.warmup < 0:
        ap.error("--reps, --seconds and --threads must be positive, --warmup not negative")

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    # Rows asked for by name must run; rows of the defaults that cannot run here are
    # left out, saying why.
    engines = a.engines or list(ENGINES)
    for e in list(engines):
        why = why_cannot_row(e)
        if why and a.engines is None and e != "bpftrace":
            log(f"probe_cost: {e} rows left out: {why}")
            engines.remove(e)
    rows = valid_rows(engines, a.modes or [m for m in MODES if m not in ASKED_ONLY])
    if not rows:
        ap.error("no engine/mode combination (tshark goes with capture, the others "
                 "with hist and events)")
    why = why_cannot_run(sorted({r.engine for r in rows}), a.targets)
    if why:
        log(f"probe_cost: cannot run: {why}")
        return 2

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)

    stats = BpfStats()
    report = {"config": {"reps": a.reps, "seconds": a.seconds, "threads": a.threads,
                         "connections": counts,
                         "pinned": not a.no_pin, "kernel": os.uname().release,
                         "stats_via": stats.via,
                         "tracers": tracers({r.engine for r in rows})},
              "rows": [], "none_ops_per_s": {}}
    try:
        with tempfile.TemporaryDirectory(prefix="probe_cost.") as tmp:
            for n in counts:
                a.threads = n
                for name in a.targets:
                    results = run_target(name, rows, a, stats, tmp, log)
                    report["rows"] += [dict(summarize(name, r), connections=n)
                                       for r in results]
                    nones = [p["none_ops_per_s"] for r in results for p in r.pairs]
                    key = name if len(counts) == 1 else f"{name} x{n}"
                    report["none_ops_per_s"][key] = statistics.median(nones) if nones else None
            a.threads = counts[0]
    except BenchError as e:
        log(f"probe_cost: {e}")
        return 1
    except KeyboardInterrupt:
        log("probe_cost: interrupted")
        return 130
    finally:
        stats.off()        # no counting left on; the sysctl as it was
    if a.json:
        print(json.dumps(report, indent=1))
    else:
        print(render(report), end="")
    return 1 if any(r["errors"] for r in report["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
