#!/usr/bin/env python3
"""longrun.py - phases and report on a one-hour run at 50k requests/s (issue 10, part 4).

USAGE: .venv/bin/python bench/longrun.py [--hours H] [--rate R] [--keep DIR] [--quick]
                                         [--variants hist,events] [--seed N] [--json]

1. Generates a synthetic run -- by default one hour at 50,000 requests/s, 180 million
   requests -- in the formats ``mongoprobe record`` writes, twice:

   * ``hist/``: what ``record --probes latency,vmstat,iostat`` keeps. ``manifest.json``
     in record's shape (the ``latency`` collector's argv, clocks, host), and
     ``latency.bt.json`` as ``bpftrace -f json probes/mongo_latency.bt PID 0 0``
     prints it: per second an ``@slice K`` line, then the maps ``@pN`` (log-linear
     buckets per command words and opcode, each its count and latencies' sum packed
     in one number), ``@qN`` (max per CPU and command) and the cumulative counters,
     and at the end the open connections (``@c``, whose heads count the requests);
     ``load.out`` with a load tool's ``### phase
     start|end`` markers, as record stamps its lines; ``vmstat.txt`` (``vmstat -n -t
     1``) and ``iostat.txt`` (``iostat -x -t 1``).
   * ``events/``: the same run recorded with ``record --events``: the same requests,
     every one of them a row of ``latency.events.parquet`` (the
     ``formats/wire_events`` table, written in row groups with pyarrow as it is
     generated: never all in memory), ``@events_kept`` among the probe's counters,
     ``latency_events_every`` 1 in the manifest.

   The requests: four phases with different command mixes (``load``: inserts;
   ``mixed``: finds, inserts, updates, getMores; ``read``: finds, getMores,
   aggregates; ``update``: updates, finds, deletes) separated by short idle gaps
   where only monitoring (``hello``) is seen; per command a log-normal latency
   (median 120 us to 2.5 ms), slower in the mixed phase, and every 60 s a one-second
   stall where a fifth of the requests take twenty times longer (a checkpoint). 64
   connections, 8 server threads. Times are uniform inside each second.

2. Times ``mongoprobe phases RUN``, ``mongoprobe report RUN -o RUN/report.html`` and
   ``mongoprobe compare RUN TWIN`` (TWIN: the same files again)
   on each variant, each in a fresh process: wall time, CPU time (user + system) and
   peak RSS (the child's own, from wait4) beside the goals (under 60 s, under 2 GB
   peak RSS) and the ratio to the goal. The machine has 2 shared cores: CPU time says
   how much of the wall time was the command's own.

Disk: the events variant takes about 9 bytes per request (1.6 GB at full size), the
probe's JSON 72 MB per variant; the bench checks the free space first and refuses in
one line when it will not fit.
``--keep DIR`` keeps both run directories in DIR (else a temporary directory is
removed at the end). ``--quick`` is a smoke test: 4 minutes at 2,000 requests/s.
Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TOP = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TOP / "analyzer"))

from mongoprobe.model import loglinear_buckets as loglinear  # noqa: E402
from mongoprobe.formats.bpftrace_latency import PACK_BITS  # noqa: E402

GOAL_S = 60.0
GOAL_RSS = 2 * 2**30
COMPARE_GOAL = 2.0        # compare of two runs: at most this many times phases on one
EVENT_BYTES = 12            # Parquet (zstd) per request: 9 measured here, and a margin
CHUNK_S = 20                # seconds generated at once (one Parquet row group each)
STALL_EVERY_S = 60
OP_MSG = 2013
PID = 4127                  # the synthetic server's pid
T0 = 1_795_600_000          # the synthetic run's wall clock start (2026-11-24)
MONO0 = 8_000               # its CLOCK_MONOTONIC start, seconds

# command: (median latency ns, log-normal sigma, request bytes, reply bytes)
COMMANDS = {
    "insert": (180_000, 0.5, 420, 45),
    "find": (350_000, 0.7, 160, 900),
    "update": (260_000, 0.6, 230, 60),
    "getMore": (120_000, 0.4, 110, 4200),
    "aggregate": (2_500_000, 0.8, 380, 2600),
    "delete": (220_000, 0.5, 150, 45),
    "hello": (25_000, 0.3, 300, 320),
}
NAMES = list(COMMANDS)
# name, share of the run, {command: share of its requests}, latency factor
PHASES = [
    ("load", 0.25, {"insert": 0.97, "find": 0.03}, 1.0),
    ("mixed", 0.30, {"find": 0.50, "insert": 0.20, "update": 0.25, "getMore": 0.05}, 1.5),
    ("read", 0.25, {"find": 0.80, "getMore": 0.15, "aggregate": 0.05}, 1.0),
    ("update", 0.20, {"update": 0.70, "find": 0.25, "delete": 0.05}, 1.2),
]
GAP_S = 1.5                 # idle between phases: monitoring only
HELLO_PER_S = 2.0           # monitoring requests per second, all along
COUNTERS = ("no_reply", "stream_replies", "closed_requests", "lost_unmatched_replies",
            "lost_requests_without_reply", "lost_malformed", "lost_dropped")


def words(name: str) -> tuple[int, int, int]:
    """A command name as the probe carries it: three little-endian u64 words
    (``formats/wire_slices.name_of_words`` reads them back)."""
    return struct.unpack("<QQQ", name.encode()[:24].ljust(24, b"\0"))


@dataclass
class Spec:
    seconds: int
    rate: int
    seed: int = 1

    @property
    def requests(self) -> int:
        return self.seconds * self.rate

    def phase_bounds(self) -> list[tuple[str, float, float]]:
        """(name, start, end) in seconds from the first slice: the markers' times,
        off the whole seconds (a phase starts and ends inside a second)."""
        out, t = [], 0.37
        usable = self.seconds - 0.37 - 0.5 - GAP_S * (len(PHASES) - 1)
        for i, (name, share, _, _) in enumerate(PHASES):
            end = t + share * usable
            out.append((name, t, end))
            t = end + GAP_S
        return out


# --- the synthetic requests ----------------------------------------------------------


def generate(spec: Spec, first: int, n_s: int, rng: np.random.Generator, rid0: int) -> dict:
    """The requests answered in seconds [first, first + n_s) of the run: arrays, in time
    order (``off_ns``: nanoseconds from the first slice)."""
    bounds = spec.phase_bounds()
    starts = np.array([b[1] for b in bounds])
    ends = np.array([b[2] for b in bounds])
    n = spec.rate * n_s
    off = np.sort(rng.integers(first * 10**9, (first + n_s) * 10**9, n))
    t = off / 1e9
    ph = np.searchsorted(starts, t, side="right") - 1
    inside = (ph >= 0) & (t < ends[np.maximum(ph, 0)])
    # the monitoring requests, all along; in the gaps only they remain
    hello = rng.random(n) < HELLO_PER_S / spec.rate
    keep = inside | hello
    off, t, ph, hello = off[keep], t[keep], ph[keep], hello[keep]
    n = len(off)
    code = np.full(n, NAMES.index("hello"), dtype=np.int64)
    factor = np.ones(n)
    for i, (_, _, mix, f) in enumerate(PHASES):
        sel = (ph == i) & ~hello
        k = int(sel.sum())
        if not k:
            continue
        cmds = [NAMES.index(c) for c in mix]
        code[sel] = rng.choice(cmds, size=k, p=np.array(list(mix.values())))
        factor[sel] = f
    med = np.array([COMMANDS[c][0] for c in NAMES], dtype=float)[code]
    sig = np.array([COMMANDS[c][1] for c in NAMES])[code]
    lat = med * factor * np.exp(sig * rng.standard_normal(n))
    stall = (np.floor(t).astype(np.int64) % STALL_EVERY_S == STALL_EVERY_S - 1) & \
        (rng.random(n) < 0.2)
    lat[stall] *= 20
    lat = np.maximum(lat, 1000).astype(np.int64)
    fd = rng.integers(10, 74, n)
    return {"off_ns": off, "code": code, "latency_ns": lat, "fd": fd,
            "tid": PID + 1 + fd % 8, "request_id": rid0 + np.arange(n),
            "bytes_in": np.array([COMMANDS[c][2] for c in NAMES])[code] + fd % 7,
            "bytes_out": np.array([COMMANDS[c][3] for c in NAMES])[code] + fd % 5}


# --- the probe's output --------------------------------------------------------------


def _line(kind: str, data) -> str:
    return json.dumps({"type": kind, "data": data}) + "\n"


class ProbeWriter:
    """``latency.bt.json`` as mongo_latency.bt prints it under ``bpftrace -f json``,
    for the histogram variant and (with @events_kept) the events variant at once."""

    def __init__(self, hist_fh, events_fh=None):
        self.out = [hist_fh] + ([events_fh] if events_fh else [])
        self.events_fh = events_fh
        self.requests = 0
        self.prefix = [",".join(map(str, words(c))) + f",{OP_MSG}" for c in NAMES]
        mono = (MONO0 - 1) * 10**9 + 412_345_678
        head = (_line("attached_probes", {"probes": 17})
                + _line("printf", f"# clock monotonic_ns={mono} elapsed_ns=837640\n")
                + _line("printf", f"Tracing MongoDB wire protocol of PID {PID} (read/write/"
                        "readv/writev/recvfrom/sendto/recvmsg/sendmsg)... Hit Ctrl-C to "
                        "end.\n"))
        self._write(head)

    def _write(self, text: str, events_only: bool = False) -> None:
        for fh in ([self.events_fh] if events_only else self.out):
            fh.write(text)

    def seconds(self, first: int, n_s: int, ev: dict) -> None:
        """One slice per second of the chunk, from its requests."""
        sec = ev["off_ns"] // 10**9 - first
        b = loglinear.index(ev["latency_ns"])
        nb, nc = int(b.max()) + 1, len(NAMES)
        key = (sec * nc + ev["code"]) * nb + b
        keys, inv, counts = np.unique(key, return_inverse=True, return_counts=True)
        ks, kc, kb = keys // (nc * nb), keys // nb % nc, keys % nb
        # a bucket's value as the probe adds it up: (its latencies' sum << 20) + its
        # count, in 64 bits (bpftrace_latency.PACK_BITS), printed signed
        sums = np.zeros(len(keys), dtype=np.uint64)
        np.add.at(sums, inv, ev["latency_ns"].astype(np.uint64))
        packed = ((sums << np.uint64(PACK_BITS)) + counts.astype(np.uint64)).view(np.int64)
        sc = sec * nc + ev["code"]
        cnt = np.bincount(sc, minlength=n_s * nc)
        mx = np.zeros(n_s * nc, dtype=np.int64)
        np.maximum.at(mx, sc, ev["latency_ns"])
        edges = np.searchsorted(ks, np.arange(n_s + 1))
        for s in range(n_s):
            k = first + s
            view = (MONO0 + k) % 3
            lo, hi = edges[s], edges[s + 1]
            text = [_line("printf", f"@slice {MONO0 + k}\n")]
            if hi > lo:
                text.append(_line("map", {f"@p{view}": {
                    f"{self.prefix[c]},{bb}": int(n)
                    for c, bb, n in zip(kc[lo:hi].tolist(), kb[lo:hi].tolist(),
                                        packed[lo:hi].tolist())}}))
                # the max per (CPU, command): all on CPU 0 here
                text.append(_line("map", {f"@q{view}": {
                    f"0,{self.prefix[c]}": int(mx[s * nc + c])
                    for c in range(nc) if cnt[s * nc + c]}}))
            self.requests += int(cnt[s * nc:(s + 1) * nc].sum())
            text += [_line("map", {f"@{c}": 0}) for c in COUNTERS]
            self._write("".join(text))
            if self.events_fh:      # printed last, with EVENTS_EVERY only
                self._write(_line("map", {"@events_kept": self.requests}), events_only=True)

    def end(self) -> None:
        # the probe counts requests by connection: those closed, and at the end the
        # open ones' ring heads (@c: REM, POS, HEAD, TAIL, TXR, FLAGS), all answered
        conns = {str(9 + i): [0, 0, n, n, 0, 1] for i, n in
                 enumerate(np.diff(np.linspace(0, self.requests, 9).astype(np.int64)).tolist())}
        self._write(_line("map", {"@c": conns}) + _line("printf", "@end\n"))


# --- the run directories -------------------------------------------------------------


def manifest(spec: Spec, every: int) -> dict:
    from mongoprobe import __version__
    from mongoprobe.run.record import host_facts

    host, kernel = host_facts()
    offset = T0 * 10**9 - MONO0 * 10**9
    start, end = T0 - 1.0, T0 + spec.seconds + 0.5
    clock = lambda t: {"realtime_ns": int(t * 1e9), "monotonic_ns": int(t * 1e9) - offset,  # noqa: E731
                       "offset_ns": offset, "uncertainty_ns": 130}
    col = lambda name, out, fmt, argv, kind="system": {  # noqa: E731
        "kind": kind, "output": out, "format": fmt, "status": "stopped", "argv": argv,
        "stderr": f"{name}.err", "started": start + 0.1, "ready": start + 0.6,
        "stopped": end - 0.2, "died_at": None, "returncode": 0, "error": None,
        "note": None, "pid": PID + 100}
    argv = ["longrun-load", "--rate", str(spec.rate), "--seconds", str(spec.seconds)]
    files = {"load_out": "load.out", "load_stdout": "load.stdout"}
    if every:
        files["latency_events"] = "latency.events.parquet"
    return {
        "format": "mongoprobe-run", "version": 1, "status": "complete",
        "record_argv": ["mongoprobe", "record", "-p", str(PID), "-o", "RUN", "--probes",
                        "latency,vmstat,iostat", *(["--events"] if every else []), "--",
                        *argv],
        "command": {"argv": argv, "pid": PID + 200, "env": {"PYTHONUNBUFFERED": "1"},
                    "start": start + 0.8, "end": end - 0.3, "returncode": 0},
        "ended_by": "command", "start": start, "end": end,
        "clock": {"start": clock(start), "end": clock(end), "drift_ns": 0,
                  "note": "wall_ns = monotonic_ns + offset_ns"},
        "interval": 1.0, "host": host, "kernel": kernel,
        "tools": {"bpftrace": None, "python": sys.version.split()[0],
                  "mongoprobe": __version__},
        "target": {"pid": PID, "exe": "mongod", "cmdline": ["mongod"], "comm": "mongod",
                   "kind": "pid", "uri": None, "metrics_url": None, "port": 27017,
                   "version": None, "exited_at": None},
        "probes_requested": ["latency", "vmstat", "iostat"],
        "collectors": {
            "latency": col("latency", "latency.bt.json", "bpftrace-json",
                           ["bpftrace", "-f", "json", "probes/mongo_latency.bt", str(PID),
                            "0", str(every)], kind="probe"),
            "vmstat": col("vmstat", "vmstat.txt", "vmstat", ["vmstat", "-n", "-t", "1"]),
            "iostat": col("iostat", "iostat.txt", "iostat", ["iostat", "-x", "-t", "1"]),
        },
        "metrics": {"url": None, "before": None, "after": None},
        "latency_events_every": every,
        "notes": [{"time": start, "what": "synthetic run written by bench/longrun.py "
                   f"(seed {spec.seed}): no server ran"}],
        "files": files,
    }


def load_out(spec: Spec) -> str:
    """The load tool's output as record stamps it: phase markers."""
    out = [f"{T0 - 0.2:.6f}\tstdout\t# longrun-load: {spec.rate} requests/s, "
           f"{spec.seconds} s"]
    for name, a, b in spec.phase_bounds():
        out.append(f"{T0 + a:.6f}\tstdout\t### phase start name={name} time={T0 + a:.6f}")
        out.append(f"{T0 + b:.6f}\tstdout\t### phase end name={name} time={T0 + b:.6f}")
    return "".join(s + "\n" for s in out)


def system_stats(spec: Spec, rng: np.random.Generator) -> tuple[str, str]:
    """vmstat -n -t 1 and iostat -x -t 1 output, one sample per second."""
    vm = ["procs -----------memory---------- ---swap-- -----io---- -system-- "
          "------cpu----- -----timestamp-----",
          " r  b   swpd   free   buff  cache   si   so    bi    bo   in   cs us sy id wa st"
          "                 UTC"]
    io = ["Linux 6.1.0 (synthetic) \t2026-11-24 \t_x86_64_\t(2 CPU)", ""]
    head = ("Device            r/s     rkB/s   rrqm/s  %rrqm r_await rareq-sz     w/s     "
            "wkB/s   wrqm/s  %wrqm w_await wareq-sz     d/s     dkB/s   drqm/s  %drqm "
            "d_await dareq-sz     f/s f_await  aqu-sz  %util")
    for k in range(-1, spec.seconds + 1):
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(T0 + k))
        us, sy = int(rng.integers(40, 60)), int(rng.integers(20, 30))
        vm.append(f"{2:2d} {0:2d} {0:6d} {21000000:6d} {1700:6d} {1100000:6d} {0:4d} {0:4d} "
                  f"{int(rng.integers(0, 500)):5d} {int(rng.integers(2000, 9000)):5d} "
                  f"{int(rng.integers(8000, 12000)):4d} {int(rng.integers(40000, 60000)):4d} "
                  f"{us:2d} {sy:2d} {100 - us - sy:2d} {0:2d} {0:2d} {stamp}")
        r, w = rng.uniform(0, 30), rng.uniform(100, 400)
        io += [time.strftime("%Y-%m-%dT%H:%M:%S+0000", time.gmtime(T0 + k)),
               "avg-cpu:  %user   %nice %system %iowait  %steal   %idle",
               f"          {us:6.2f}    0.00   {sy:6.2f}    0.10    0.00   "
               f"{100 - us - sy - 0.1:6.2f}", "", head,
               f"vda          {r:8.2f} {r * 16:9.2f}     0.00   0.00    0.20    16.00 "
               f"{w:7.2f} {w * 24:9.2f}     3.00   1.00    0.15    24.00    0.00      "
               "0.00     0.00   0.00    0.00     0.00    0.00    0.00    0.05   2.10", "", ""]
    return "".join(s + "\n" for s in vm), "".join(s + "\n" for s in io)


def events_schema():
    import pyarrow as pa
    from mongoprobe.formats import wire_events

    types = {"time": pa.float64(), "elapsed_s": pa.float64(), "opcode": pa.large_string(),
             "command": pa.large_string(), "stream": pa.bool_()}
    return pa.schema([(c, types.get(c, pa.int64())) for c in wire_events.COLUMNS])


def write_runs(spec: Spec, out: Path, variants: tuple[str, ...], progress
               ) -> tuple[dict, int]:
    """The run directories of ``variants`` in ``out``: ({variant: Path}, the requests
    generated: ``spec.requests`` less the work left out in the idle gaps)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dirs = {v: out / v for v in variants}
    for v, d in dirs.items():
        d.mkdir(parents=True)
        (d / "manifest.json").write_text(json.dumps(manifest(spec, int(v == "events")),
                                                    indent=2) + "\n")
        text = load_out(spec)
        (d / "load.out").write_text(text)
        (d / "load.stdout").write_text("".join(s.split("\t", 2)[2] + "\n"
                                               for s in text.splitlines()))
        (d / "latency.err").write_text("")
    rng = np.random.default_rng(spec.seed)
    vm, io = system_stats(spec, np.random.default_rng(spec.seed + 1))
    for d in dirs.values():
        (d / "vmstat.txt").write_text(vm)
        (d / "iostat.txt").write_text(io)
        (d / "vmstat.err").write_text("")
        (d / "iostat.err").write_text("")
    hist_fh = open(dirs["hist"] / "latency.bt.json", "w") if "hist" in dirs else \
        open(os.devnull, "w")
    ev_fh = open(dirs["events"] / "latency.bt.json", "w") if "events" in dirs else None
    writer = ProbeWriter(hist_fh, ev_fh)
    pw = None
    if "events" in dirs:
        pw = pq.ParquetWriter(dirs["events"] / "latency.events.parquet", events_schema(),
                              compression="zstd")
    cmd_names = pa.array(NAMES, type=pa.large_string())
    offset_s = T0 - 0  # wall seconds of the first slice's start
    rid = 1
    t0 = time.monotonic()
    for first in range(0, spec.seconds, CHUNK_S):
        n_s = min(CHUNK_S, spec.seconds - first)
        ev = generate(spec, first, n_s, rng, rid)
        rid += len(ev["off_ns"])
        writer.seconds(first, n_s, ev)
        if pw is not None:
            n = len(ev["off_ns"])
            cols = {
                "time": offset_s + ev["off_ns"] / 1e9, "elapsed_s": np.full(n, np.nan),
                "pid": np.full(n, PID, dtype=np.int64), "tid": ev["tid"], "fd": ev["fd"],
                "request_id": ev["request_id"],
                "opcode": pa.array(["OP_MSG"], type=pa.large_string()).take(
                    np.zeros(n, dtype=np.int32)),
                "command": cmd_names.take(ev["code"]), "bytes_in": ev["bytes_in"],
                "bytes_out": ev["bytes_out"], "latency_ns": ev["latency_ns"],
                "stream": np.zeros(n, dtype=bool), "error_code": np.zeros(n, dtype=np.int64)}
            pw.write_table(pa.table(cols, schema=events_schema()), row_group_size=1 << 20)
        progress(f"generating: {first + n_s}/{spec.seconds} s, {writer.requests:,} requests,"
                 f" {time.monotonic() - t0:.0f} s")
    writer.end()
    hist_fh.close()
    if ev_fh:
        ev_fh.close()
    if pw is not None:
        pw.close()
    return dirs, writer.requests


# --- timing ----------------------------------------------------------------------------


def timed(argv: list[str], stdout) -> dict:
    """Run ``argv``; its wall time, CPU time and peak RSS (wait4: the child's own).
    On a terminal the child writes to it (its own progress lines show), else its
    stderr is kept to say why it failed."""
    env = dict(os.environ, PYTHONPATH=str(TOP / "analyzer"))
    tty = sys.stderr.isatty()
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=stdout, stderr=None if tty else subprocess.PIPE,
                         env=env)
    err = b"" if tty else p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - t0
    return {"wall_s": wall, "cpu_s": ru.ru_utime + ru.ru_stime,
            "rss_bytes": ru.ru_maxrss * 1024, "returncode": p.returncode,
            "load_avg": os.getloadavg()[0], "stderr": err.decode(errors="replace")}


def twin(run: Path) -> Path:
    """A second run folder of the same files (symbolic links): what ``compare`` of two
    runs of this size reads, without writing the run twice."""
    out = run.parent / f"{run.name}-twin"
    out.mkdir(exist_ok=True)
    for f in run.iterdir():
        if f.is_file() and not (out / f.name).exists():
            (out / f.name).symlink_to(f.resolve())
    return out


def measure(run: Path, compare: bool = True) -> dict:
    py = [sys.executable, "-m", "mongoprobe"]
    with open(run / "phases.txt", "w") as fh:
        ph = timed([*py, "phases", str(run)], fh)
    rep = timed([*py, "report", str(run), "-o", str(run / "report.html")],
                subprocess.DEVNULL)
    if not compare:
        return {"phases": ph, "report": rep}
    # two runs side by side (goal: at most COMPARE_GOAL times phases on one)
    cmp = timed([*py, "compare", str(run), str(twin(run)), "--json"], subprocess.DEVNULL)
    return {"phases": ph, "report": rep, "compare": cmp}


def table(spec: Spec, requests: int, results: dict) -> str:
    lines = [f"{spec.seconds} s at {spec.rate:,} requests/s: {requests:,} requests "
             f"(goals: under {GOAL_S:.0f} s, under {GOAL_RSS / 2**30:.0f} GB peak RSS)",
             f"{'variant':9s} {'command':8s} {'wall s':>7s} {'x goal':>6s} {'cpu s':>7s} "
             f"{'peak RSS':>9s} {'x goal':>6s} {'load':>5s}  result"]
    for v, r in results.items():
        for cmd, m in r.items():
            ok = m["returncode"] == 0
            met = ok and m["wall_s"] < GOAL_S and m["rss_bytes"] < GOAL_RSS
            lines.append(f"{v:9s} {cmd:8s} {m['wall_s']:7.1f} {m['wall_s'] / GOAL_S:6.2f} "
                         f"{m['cpu_s']:7.1f} {m['rss_bytes'] / 2**20:7.0f}MB "
                         f"{m['rss_bytes'] / GOAL_RSS:6.2f} {m['load_avg']:5.1f}  "
                         + ("met" if met else "FAILED (exit %d)" % m["returncode"]
                            if not ok else "goal missed"))
    for v, r in results.items():
        if "compare" in r and r["phases"]["wall_s"] > 0:
            ratio = r["compare"]["wall_s"] / r["phases"]["wall_s"]
            lines.append(f"{v}: compare of two runs / phases of one: {ratio:.2f} of wall time "
                         f"(goal at most {COMPARE_GOAL:g}: "
                         f"{'met' if ratio <= COMPARE_GOAL else 'missed'})")
    lines += ["(load: the machine's 1-minute load average after the command; above its",
              f"CPU count ({os.cpu_count()}), other work shared the CPUs: wall time then "
              "exceeds CPU time)"]
    return "\n".join(lines)


def needed_bytes(spec: Spec, variants) -> int:
    per_s = 40_000          # the probe's JSON per second: 20 kB measured at 50k/s
    b = len(variants) * spec.seconds * (per_s + 2_000)
    if "events" in variants:
        b += spec.requests * EVENT_BYTES
    return int(b)


class Progress:
    """One line on stderr, rewritten on a terminal; else a line every 10 s."""

    def __init__(self):
        self.tty = sys.stderr.isatty()
        self.last = time.monotonic()

    def __call__(self, text: str) -> None:
        now = time.monotonic()
        if self.tty:
            print(f"\r{text[:79]:79s}", end="", file=sys.stderr, flush=True)
        elif now - self.last > 10:
            print(text, file=sys.stderr, flush=True)
            self.last = now

    def done(self) -> None:
        if self.tty:
            print(file=sys.stderr)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n"
                                 "  bench/longrun.py                      # 1 h, 50k/s\n"
                                 "  bench/longrun.py --quick --keep runs/lr   # smoke test\n"
                                 "  bench/longrun.py --variants hist --hours 0.5\n")
    ap.add_argument("--hours", type=float, default=1.0,
                    help="the run's length (default 1: with --rate, 180M requests)")
    ap.add_argument("--rate", type=int, default=50_000, help="requests per second")
    ap.add_argument("--keep", metavar="DIR", help="write the runs here and keep them")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke test: 4 minutes at 2,000 requests/s")
    ap.add_argument("--variants", default="hist,events",
                    help="hist (histograms only), events (every request too)")
    ap.add_argument("--seed", type=int, default=1, help="of the synthetic requests")
    ap.add_argument("--json", action="store_true", help="the measurements as JSON")
    a = ap.parse_args(argv)
    variants = tuple(v for v in a.variants.split(",") if v)
    if not variants or set(variants) - {"hist", "events"}:
        ap.error("--variants: hist, events or both")
    spec = Spec(240, 2000, a.seed) if a.quick else Spec(int(round(a.hours * 3600)), a.rate,
                                                        a.seed)
    if spec.seconds < 60:
        ap.error("the run needs at least a minute (--hours 0.02)")
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="mongoprobe-longrun-"))
    if a.keep and base.exists() and any(base.iterdir()):
        print(f"longrun: {base} exists and is not empty", file=sys.stderr)
        return 1
    base.mkdir(parents=True, exist_ok=True)
    need, free = needed_bytes(spec, variants), shutil.disk_usage(base).free
    if need > free:
        print(f"longrun: {base}: {need / 2**30:.1f} GB needed for {', '.join(variants)}, "
              f"{free / 2**30:.1f} GB free (try --variants hist or fewer --hours)",
              file=sys.stderr)
        return 1
    prog = Progress()
    try:
        t0 = time.monotonic()
        dirs, requests = write_runs(spec, base, variants, prog)
        prog.done()
        print(f"longrun: generated {requests:,} requests in "
              f"{time.monotonic() - t0:.0f} s: {', '.join(str(d) for d in dirs.values())}"
              if a.keep else f"longrun: generated {requests:,} requests in "
              f"{time.monotonic() - t0:.0f} s", file=sys.stderr)
        results = {}
        for v, d in dirs.items():
            print(f"longrun: timing phases and report on {v}/", file=sys.stderr, flush=True)
            results[v] = measure(d)
            for cmd, m in results[v].items():
                if m["returncode"] != 0:
                    last = (m["stderr"].strip().splitlines() or ["(see above)"])[-1]
                    print(f"longrun: {v}: {cmd} failed: {last}", file=sys.stderr)
    finally:
        if not a.keep:
            shutil.rmtree(base, ignore_errors=True)
    if a.json:
        print(json.dumps({"seconds": spec.seconds, "rate": spec.rate,
                          "requests": requests, "goal_s": GOAL_S,
                          "goal_rss_bytes": GOAL_RSS,
                          "results": {v: {c: {k: x for k, x in m.items() if k != "stderr"}
                                          for c, m in r.items()} for v, r in
                                      results.items()}}))
    else:
        print(table(spec, requests, results))
    failed = any(m["returncode"] for r in results.values() for m in r.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
