"""The wire-probe harness: tests/wireserver.py (one mode, or every mode in one process),
a probe process (Probe), the tools' availability, and one output shape (Observed) for
the bpftrace, bcc and DTrace latency tools."""

from __future__ import annotations

import functools
import json
import os
import platform
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from mongoprobe.model import loglinear_buckets as loglinear
from mongoprobe.run import tracer as mp_probes
from mongoprobe.run.child import CATCH_UP_MAX, polling

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
WIRESERVER = TESTS / "wireserver.py"
BPFTRACE_TOOL = ROOT / "probes" / "mongo_latency.bt"
BCC_TOOL = ROOT / "probes" / "mongolatency.py"
DTRACE_TOOL = ROOT / "dtrace" / "mongo_time.d"
SYSTEM_PYTHON = mp_probes.bcc_python()  # Debian's python3-bpfcc, or $MONGOPROBE_BCC_PYTHON
BPFTRACE = mp_probes.bpftrace_binary()  # bpftrace on PATH, or $MONGOPROBE_BPFTRACE
# a guard against hangs: bcc and DTrace compile for tens of seconds on a busy box (the
# suite runs on a worker per CPU; a DTrace TLS script took over 60 s beside another test)
ATTACH_TIMEOUT = 300.0
STOP_TIMEOUT = 30.0
CONNECTIONS = 4  # the client's concurrent connections (each scenario on each)


def tracing_unavailable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to load BPF programs"
    tracefs = Path("/sys/kernel/tracing")
    if not (tracefs / "events").is_dir():
        return f"tracefs is not mounted at {tracefs} (mount -t tracefs nodev {tracefs})"
    return None


UNAVAILABLE = tracing_unavailable()


@functools.cache
def tool_unavailable(tool: str, binary: str | None = None) -> str | None:
    """Why TOOL (bpftrace, bcc, dtrace) cannot run here, None if it can; BINARY: the
    bpftrace or bcc python to check (default: the package's)."""
    if tool == "bpftrace":
        binary = binary or BPFTRACE
        return None if shutil.which(binary) else f"{binary} is not installed (Debian package bpftrace)"
    if tool == "dtrace":
        return mp_probes.why_cannot_dtrace()
    binary = binary or SYSTEM_PYTHON
    if not BCC_TOOL.exists():
        return "probes/mongolatency.py not present"
    check = subprocess.run([binary, "-c", "import bcc"], capture_output=True, text=True)
    if check.returncode != 0:
        error = (check.stderr.strip().splitlines() or ["no error output"])[-1]
        return f"bcc cannot be imported by {binary} (Debian python3-bpfcc): {error}"
    headers = Path("/lib/modules") / os.uname().release / "build"
    if not headers.exists():
        return f"bcc needs kernel headers at {headers} (scripts/setup.sh links Debian 12's)"
    return None


# --- servers -----------------------------------------------------------------------------


def _stop_server(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    proc.stdout.close()


def _ready_line(proc: subprocess.Popen, what: str, err: Path) -> str:
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    if not line.startswith("READY "):
        pytest.fail(f"{what} did not start: {line!r} {err.read_text()}")
    return line


@contextmanager
def wireserver(mode: str, workdir: Path, tls: tuple[Path, Path] | None = None,
               extra: tuple[str, ...] = ()) -> Iterator[tuple[int, int]]:
    """tests/wireserver.py in `mode` (serving TLS with tls's certificate and key, when
    given; more options in extra): (pid, port). Fails if it reported errors."""
    err = workdir / "server.err"
    what = f"wireserver{' --tls' if tls else ''} --mode {mode} {' '.join(extra)}".rstrip()
    with open(err, "w") as errfile:
        proc = subprocess.Popen([sys.executable, str(WIRESERVER), "--port", "0", "--mode", mode,
                                 "--log", str(workdir / "server.log"),
                                 *(["--tls", str(tls[0]), str(tls[1])] if tls else []), *extra],
                                stdout=subprocess.PIPE, stderr=errfile, text=True)  # fmt: skip
    try:
        line = _ready_line(proc, what, err)
        yield proc.pid, int(line.split()[1])
    finally:
        _stop_server(proc)
    if err.read_text():
        pytest.fail(f"{what} reported errors:\n{err.read_text()}")


# One process, one listener per mode, each connection served by wireserver.handle in
# its mode: a tool traces one pid and sees every pattern. The listeners are served from
# the main thread, as wireserver.py serves its one: no other thread exists when a tracer
# grabs the process. (Seen with listener threads: under dtrace -p the process died of
# SIGTRAP, an int3 in ld.so, when a connection thread first imported a codec.)
SERVE_ALL_MODES = """
import selectors, socket, sys, threading
import wireserver
log = wireserver.Log(sys.argv[1])
listeners = selectors.DefaultSelector()
ports = []
for mode in wireserver.MODES:
    listener = socket.create_server(("127.0.0.1", 0))
    ports.append(f"{mode}={listener.getsockname()[1]}")
    listeners.register(listener, selectors.EVENT_READ, mode)
print("READY", *ports, flush=True)
while True:
    for key, _ in listeners.select():
        sock, _ = key.fileobj.accept()
        threading.Thread(target=wireserver.handle, args=(sock, key.data, log, None),
                         daemon=True).start()
"""


@contextmanager
def all_modes_server(workdir: Path) -> Iterator[tuple[int, dict[str, int]]]:
    """Every tests/wireserver.py mode in one process: (pid, {mode: port}). Fails if it
    reported errors."""
    err = workdir / "server.err"
    with open(err, "w") as errfile:
        proc = subprocess.Popen([sys.executable, "-c", SERVE_ALL_MODES, str(workdir / "server.log")],
                                cwd=TESTS, stdout=subprocess.PIPE, stderr=errfile, text=True,
                                env={**os.environ, "PYTHONPATH": os.pathsep.join(
                                    [str(TESTS), os.environ.get("PYTHONPATH", "")])})
    try:
        line = _ready_line(proc, "the all-modes server", err)
        yield proc.pid, {mode: int(port) for mode, port in
                         (kv.split("=") for kv in line.split()[1:])}
    finally:
        _stop_server(proc)
    assert err.read_text() == "", f"the server reported errors:\n{err.read_text()}"


# --- a probe process ---------------------------------------------------------------------

CLOCK_NANOSLEEP = {"x86_64": 230, "aarch64": 115}.get(platform.machine())


def sleeping_in_main_loop(pid: int) -> bool:
    """mongolatency.py -j prints nothing until it ends; once attached it sleeps in its main
    loop (time.sleep: clock_nanosleep), which /proc/PID/syscall shows."""
    try:
        return Path(f"/proc/{pid}/syscall").read_text().split()[0] == str(CLOCK_NANOSLEEP)
    except (OSError, IndexError):
        return False


class Probe:
    """A probe process, its stdout to a file beside ``stderr`` (as record's collectors
    write theirs); `attached(probe)` says when it has attached (polled). `env`: more
    environment for it."""

    def __init__(self, argv: list[str], attached: Callable[[Probe], bool], stderr: Path,
                 stop_signal: int = signal.SIGINT, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.stop_signal = stop_signal
        self.attached = attached
        self.stderr = stderr
        # A file, not a pipe: a reader that falls behind (this process's thread, held by
        # the client's scenarios under the GIL on a busy machine) would block the tool's
        # writes, and bpftrace's print() and clear() run in its own process: held more
        # than the 1.65 s its three map sets allow, a clear takes a later second's
        # counts (the likely cause of one reply lost on bpftrace 0.23 in a full-suite run)
        self.stdout = stderr.with_name(stderr.name + ".stdout")
        env = {**os.environ, **mp_probes.BPFTRACE_ENV, **(env or {})}  # the package's settings
        with open(stderr, "w") as errfile, open(self.stdout, "w") as outfile:
            self.proc = subprocess.Popen(argv, stdout=outfile, stderr=errfile, text=True, env=env)

    @property
    def lines(self) -> list[str]:
        """Its stdout lines so far."""
        return self.stdout.read_text().splitlines(keepends=True)

    def describe(self) -> str:
        return f"{' '.join(self.argv)} (exit {self.proc.returncode}):\n{self.stderr.read_text()[-3000:]}"

    def wait_attached(self) -> None:
        deadline = time.monotonic() + ATTACH_TIMEOUT
        while not self.attached(self):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"did not attach within {ATTACH_TIMEOUT:.0f} s: {self.describe()}")
            time.sleep(0.05)

    def stop(self) -> list[str]:
        """SIGINT, as Ctrl-C (dtrace: SIGTERM), once a probe printing seconds has printed
        those over (as mongoprobe's own stop does: run.tracer.SlicePrinting); all its
        stdout lines once it has exited."""
        progress = mp_probes.slice_progress(self.argv)
        catch_up, fed = time.monotonic() + CATCH_UP_MAX, 0
        while progress is not None and self.proc.poll() is None and time.monotonic() < catch_up:
            lines = [ln for ln in self.lines if ln.endswith("\n")]   # (whole ones)
            for line in lines[fed:]:        # (each line once: the file only grows)
                progress.seen(line)
            fed = len(lines)
            if progress.caught_up():
                break
            time.sleep(0.05)
        deadline = time.monotonic() + STOP_TIMEOUT
        asked = False
        while self.proc.poll() is None and time.monotonic() < deadline:
            # SIGINT asked again every 5 s while it still polls: bpftrace 0.17 has been
            # seen to miss one and trace on, and a second SIGINT while it prints kills it
            # (mongoprobe's own stop does the same); dtrace's SIGTERM once
            if not asked or (self.stop_signal == signal.SIGINT and polling(self.proc.pid)):
                self.proc.send_signal(self.stop_signal)
                asked = True
            try:
                self.proc.wait(max(0.1, min(5.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                pass
        try:
            self.proc.wait(0.1)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            if self.stop_signal == signal.SIGTERM:
                mp_probes.remove_stale_uprobes(self.proc.pid)
            pytest.fail(f"did not exit within {STOP_TIMEOUT:.0f} s of {self.stop_signal!r}: "
                        f"{self.describe()}")
        return self.lines


# --- one output shape for every tool -----------------------------------------------------


@dataclass
class Observed:
    requests_by_command: dict[str, int]
    requests_by_op: dict[str, int]
    timed_by_command: dict[str, int]  # latency histogram totals
    stats_count_by_command: dict[str, int]  # the tool's own count of timed replies
    counts: dict[str, int | None]  # requests, replies, stream_replies, no_reply
    lost: dict[str, int | None]  # every loss counter the tool prints
    bucket_lows: dict[str, list[int]]  # "by_command find": lower bounds (ns) of its buckets
    # replies with ok: 0 per command, and per (command, code); None: not read by the tool
    errors_by_command: dict[str, int] | None = None
    error_codes: dict[tuple[str, int], int] | None = None
    # replies the server sent to requests that asked for none (moreToCome), per command
    answered_no_reply: dict[str, int] | None = None


COUNTS = ("requests", "replies", "stream_replies", "no_reply", "answered_no_reply")
BCC_LOSSES = ("unmatched_replies", "requests_without_reply", "malformed", "dropped")


def from_bpftrace(lines: list[str]) -> Observed:
    """mongo_latency.bt's per-second slices, read by the analyzer's own parser."""
    from mongoprobe.formats.bpftrace_latency import BpftraceLatency
    from mongoprobe.model.latencies import Latencies

    reader = BpftraceLatency("mongo_latency.bt")
    slices = [s for line in lines for s in reader.feed(line)] + reader.close()
    lat = Latencies.from_slices(slices, 0, counts=reader.counts, lost=reader.lost,
                                answered_no_reply=reader.answered_no_reply)
    tot, hist = lat.totals, lat.hist
    by = {"command": tot.groupby("command"), "opcode": tot.groupby("opcode")}
    requests = {k: (g["count"] + g["noreply"]).groupby(g[k]).sum() for k, g in
                (("command", tot), ("opcode", tot))}
    lows = {}
    for view, col in (("by_command", "command"), ("by_op", "opcode")):
        for key, h in hist.groupby(col):
            lows[f"{view} {key}"] = sorted(loglinear.bounds(int(b))[0] for b in h["bucket"].unique())
    return Observed(
        requests_by_command={k: int(v) for k, v in requests["command"].items() if v},
        requests_by_op={k: int(v) for k, v in requests["opcode"].items() if v},
        timed_by_command={k: int(v) for k, v in hist.groupby("command")["count"].sum().items() if v},
        stats_count_by_command={k: int(v) for k, v in by["command"]["count"].sum().items() if v},
        counts={name: lat.counts.get(name) for name in COUNTS},
        lost=lat.lost,
        bucket_lows=lows,
        errors_by_command={k: int(v) for k, v in by["command"]["errors"].sum().items() if v},
        error_codes={(c, int(code)): int(n) for (c, code), n in
                     lat.errors.groupby(["command", "code"])["count"].sum().items() if n},
        answered_no_reply=dict(lat.answered_no_reply),
    )


def bcc_report(lines: list[str]) -> dict:
    """mongolatency.py -j's one JSON object (fails unless there is exactly one)."""
    reports = [json.loads(line) for line in lines if line.strip()]
    if len(reports) != 1:
        pytest.fail(f"mongolatency.py -j printed {len(reports)} JSON objects, expected 1: {lines!r}")
    return reports[0]


def from_bcc(lines: list[str]) -> Observed:
    r = bcc_report(lines)
    rows = {f"{view} {key}": v for view in ("by_command", "by_op") for key, v in r[view].items()}
    return Observed(
        requests_by_command={cmd: v["requests"] for cmd, v in r["by_command"].items()},
        requests_by_op={op: v["requests"] for op, v in r["by_op"].items()},
        timed_by_command={cmd: sum(b["count"] for b in v["hist"]) for cmd, v in r["by_command"].items() if v["hist"]},
        stats_count_by_command={cmd: v["count"] for cmd, v in r["by_command"].items() if v["count"]},
        counts={name: r["counts"].get(name) for name in COUNTS},
        lost={name: r["lost"].get(name) for name in BCC_LOSSES},
        bucket_lows={key: [b["lo_ns"] for b in v["hist"]] for key, v in rows.items()},
        errors_by_command={cmd: v["errors"] for cmd, v in r["by_command"].items() if v["errors"]},
        error_codes={(cmd, int(code)): n for cmd, v in r["by_command"].items()
                     for code, n in v["error_codes"].items()},
        answered_no_reply=r.get("answered_no_reply_by_command"),
    )


DTRACE_LOSSES = ("unmatched_replies", "requests_without_reply", "malformed", "dropped")


def from_dtrace(lines: list[str], stderr: Path) -> Observed:
    """mongo_time.d's END output; "dropped" is what DTrace reported lost on stderr."""
    from mongoprobe.formats.dtrace_drops import lost_events, parse_dtrace_drops
    from mongoprobe.formats.dtrace_latency import (parse_dtrace_failures, parse_dtrace_latency,
                                                   parse_dtrace_latency_totals)

    text = "".join(lines)
    hists, totals = parse_dtrace_latency(text), parse_dtrace_latency_totals(text)
    failed = parse_dtrace_failures(text)
    if failed is None:
        pytest.fail("mongo_time.d printed no failed_by_command: block")
    by_cmd = failed[failed["by"] == "command"]

    def stat(name: str, by: str) -> dict[str, int]:
        t = totals[(totals["stat"] == name) & (totals["by"] == by)]
        return dict(zip(t["key"], t["value"].astype(int)))

    foot = totals[totals["by"] == ""]
    footer = dict(zip(foot["stat"], foot["value"].astype(int)))
    footer["dropped"] = lost_events(parse_dtrace_drops(stderr.read_text().splitlines()))
    nonempty = hists[hists["count"] > 0]
    return Observed(
        requests_by_command=stat("requests", "command"),
        requests_by_op=stat("requests", "op"),
        timed_by_command={k: int(v) for k, v in
                          hists[hists["by"] == "command"].groupby("key")["count"].sum().items()},
        stats_count_by_command=stat("replies", "command"),
        counts={name: footer.get(name) for name in COUNTS},
        lost={name: footer.get(name) for name in DTRACE_LOSSES},
        bucket_lows={f"by_{by} {key}": g["lo"].tolist()
                     for (by, key), g in nonempty[nonempty["by"] != "conn"].groupby(["by", "key"])},
        errors_by_command={k: int(v) for k, v in by_cmd.groupby("key")["count"].sum().items()},
        error_codes={(k, int(c)): int(n) for k, c, n in
                     zip(by_cmd["key"], by_cmd["code"], by_cmd["count"])},
        answered_no_reply=stat("answered_no_reply", "command"),
    )
