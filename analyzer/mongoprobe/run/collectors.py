"""What ``mongoprobe record`` runs beside the load: probes and system-stat collectors.

Each collector is a child process (in its own session, so a terminal Ctrl-C reaches
only ``record``, which stops them in order) whose stdout goes to a file in the run
directory and whose stderr goes to ``NAME.err`` beside it; or, for ``pcap``, the
packet capture of ``mongoprobe.pcap.capture``.

===============  =======================================  ======================  =========
name             runs                                     output (in RUN/)        ready when
===============  =======================================  ======================  =========
latency          bpftrace -f json probes/mongo_latency.bt latency.bt.json         banner
                 PID 0 EVENTS_EVERY (mongo_latency_tls.bt
                 ... LIBRARY with a TLS library hooked)
profile          bpftrace probes/profile.bt PID           profile.bt.txt          banner
offcpu           bpftrace probes/offcpu.bt PID            offcpu.bt.txt           banner
flush            bpftrace probes/flush.bt PID             flush.bt.txt            banner
syscount         bpftrace probes/syscount.bt PID          syscount.bt.txt         banner
threads          bpftrace probes/threads.bt PID           threads.bt.txt          banner
vmstat           vmstat -n -t INTERVAL                    vmstat.txt              1st line
iostat           iostat -x -t INTERVAL (S_TIME_FORMAT=ISO) iostat.txt             1st line
pidstat          pidstat -u -d -w -r -h -H -p PID INTERVAL pidstat.txt            1st line
pcap             pcap.capture.Capture(FILE, port)         capture.pcapng          start()
===============  =======================================  ======================  =========

The banner is the probe's "Tracing ... Hit Ctrl-C to end." line, printed from
BEGIN once every probe is attached. ``latency`` writes bpftrace's JSON lines as they
came: a second's histograms, counts, sums and maxima per command (and the loss
counters) once the second is over (``formats/bpftrace_latency.py``), a few KB a
second whatever the request rate; with ``events_every`` N > 0, the second's events
(every Nth request) too, which record moves to ``latency.events.parquet`` at the end
(``events_to_parquet``). The other bpftrace tools print bpftrace's text
(the format stack folders read). pidstat's ``-H`` prints epoch seconds; iostat's
times are ISO 8601; vmstat's last column is the local time (the header names the zone).
Their first report is the average since boot.

A tool that is missing is skipped with the reason (``status: skipped``); one that
cannot start or attach is ``failed`` with its error; one that exits before it was
asked to is ``died`` with the time and its last error line. The run goes on in every
case and keeps what was written. ``stop()`` sends SIGINT so a probe prints its maps,
then SIGTERM and SIGKILL if it does not end in time.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mongoprobe.model.clock import Clock
from mongoprobe.run import tracer as _probes
from mongoprobe.run.child import Child

DEFAULT = ["latency"]
MAX_CONNECTIONS = _probes.MAX_CONNECTIONS
READY = re.compile(r"Hit Ctrl-C|Tracing |Sampling |Profiling |Counting ")


@dataclass
class Context:
    """What a collector needs to know about the run."""

    pid: int
    run_dir: Path
    interval: float = 1.0
    port: int | None = None
    events_every: int = 0       # the latency probe's events: 0 none, N one in N
    max_connections: int = _probes.MAX_CONNECTIONS   # sizes the latency probe's maps
    # the OpenSSL ELF file the latency probe hooks (mongo_latency_tls.bt), or None
    tls_library: str | None = None
    engine: str = "bpftrace"    # the latency probe's: bpftrace | bcc (mongolatency.py)
    tls: str = "auto"           # bcc: its --tls (it finds and hooks the library itself)


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str                                  # probe | system | capture
    output: str                                # file name in the run directory
    argv: Callable[[Context], list[str]]
    fmt: str                                   # what the output file holds
    ready: re.Pattern | None = READY           # None: ready at the first line
    env: dict = field(default_factory=dict)
    env_default: dict = field(default_factory=dict)   # unless the user set them
    env_sized: Callable[[Context], dict] | None = None   # env_default from the context
    script: str | None = None                  # a probes/ file it needs
    tool: str | None = None                    # an executable it needs
    attach_timeout: float = 120.0
    engine: str = "bpftrace"                   # probes: the tracer that runs it


# profile.bt and offcpu.bt keep one map key per (second, thread, stacks): bpftrace's
# default of 4096 keys fills in seconds. 65536 holds about five minutes of 99 Hz
# samples on 2 CPUs with every sample distinct (the stack map is preallocated:
# about 64 MB); a full map is seen in the probe's @samples_total. Set
# BPFTRACE_MAP_KEYS_MAX in the environment for longer runs.
STACK_KEYS = _probes.bpftrace_map_keys(65536)


def _latency_keys(ctx: Context) -> dict:
    """mongo_latency.bt keeps map entries per thread and connection of the target
    (4 per connection): sized by --max-connections."""
    return _probes.bpftrace_keys(ctx.max_connections)


# The profilers print no long string: bpftrace's default string size for them
# (0.27's delete() does not compile with the wire probes' 48 bytes).
PROFILER_ENV = {k: v for k, v in _probes.BPFTRACE_ENV.items()
                if "STRLEN" not in k and "STACK" not in k}


def _bt(name: str, script: str, fmt: str, *extra: Callable[[Context], object],
        env: dict = _probes.BPFTRACE_ENV, env_default: dict | None = None,
        env_sized: Callable[[Context], dict] | None = None,
        tls_script: str | None = None, opts: list[str] | None = None) -> Spec:
    """A bpftrace tool; with tls_script, that one instead when the context has a TLS
    library to hook (its path the last argument)."""
    json_mode = fmt == "bpftrace-json"
    out = f"{name}.bt.json" if json_mode else f"{name}.bt.txt"

    def argv(ctx: Context) -> list[str]:
        tls = tls_script is not None and ctx.tls_library is not None
        return ([_probes.bpftrace_binary()] + (["-f", "json"] if json_mode else [])
                + list(opts or []) + [str(_probes.probes_dir() / (tls_script if tls else script)), str(ctx.pid)]
                + [str(f(ctx)) for f in extra] + ([ctx.tls_library] if tls else []))

    return Spec(name, "probe", out, argv, fmt, READY, dict(env),
                dict(env_default or {}), env_sized, script=script, tool="bpftrace")


BCC_EVENTS = "latency.events.raw"       # mongolatency.py's events while it runs


def _bcc_latency_argv(ctx: Context) -> list[str]:
    argv = [_probes.bcc_python(), str(_probes.probes_dir() / "mongolatency.py"),
            "-p", str(ctx.pid), "--slices", "--max-connections", str(ctx.max_connections),
            "--tls", ctx.tls]
    if ctx.events_every:
        argv += ["--events", str(ctx.run_dir / BCC_EVENTS), "--events-format", "raw",
                 "--events-sample", str(ctx.events_every)]
    return argv


# record's latency probe with --engine bcc: mongolatency.py --slices, a JSON line per
# second (formats/wire_slices.py) and the final counters; Go's crypto/tls decoded too
BCC_LATENCY = Spec("latency", "probe", "latency.bcc.jsonl", _bcc_latency_argv,
                   "bcc-slices", READY, script="mongolatency.py", engine="bcc")


def spec_for(name: str, ctx: Context) -> Spec:
    """The collector ``name`` runs for this context (the latency probe's engine)."""
    return BCC_LATENCY if name == "latency" and ctx.engine == "bcc" else SPECS[name]


def _interval_int(ctx: Context) -> int:
    return max(1, round(ctx.interval))


SPECS: dict[str, Spec] = {s.name: s for s in [
    _bt("latency", "mongo_latency.bt", "bpftrace-json", lambda c: 0,
        lambda c: c.events_every, env_sized=_latency_keys, tls_script="mongo_latency_tls.bt",
        opts=_probes.BPFTRACE_WIRE_OPTS),
    _bt("profile", "profile.bt", "bpftrace-text", env=PROFILER_ENV, env_default=STACK_KEYS),
    _bt("offcpu", "offcpu.bt", "bpftrace-text", env=PROFILER_ENV, env_default=STACK_KEYS),
    _bt("flush", "flush.bt", "bpftrace-text", env=PROFILER_ENV),
    _bt("syscount", "syscount.bt", "bpftrace-text", env=PROFILER_ENV),
    _bt("threads", "threads.bt", "bpftrace-text", env=PROFILER_ENV),
    Spec("vmstat", "system", "vmstat.txt",
         lambda c: ["vmstat", "-n", "-t", str(_interval_int(c))], "vmstat", None,
         {"LC_ALL": "C"}, tool="vmstat", attach_timeout=10),
    Spec("iostat", "system", "iostat.txt",
         lambda c: ["iostat", "-x", "-t", str(_interval_int(c))], "iostat", None,
         {"LC_ALL": "C", "S_TIME_FORMAT": "ISO"}, tool="iostat", attach_timeout=10),
    Spec("pidstat", "system", "pidstat.txt",
         lambda c: ["pidstat", "-u", "-d", "-w", "-r", "-h", "-H", "-p", str(c.pid),
                    str(_interval_int(c))], "pidstat", None, {"LC_ALL": "C"},
         tool="pidstat", attach_timeout=10),
    Spec("pcap", "capture", "capture.pcapng", lambda c: [], "pcapng", None,
         tool="tshark"),
]}


def parse_list(text: str) -> list[str]:
    """``latency,vmstat`` -> names; ``all`` means every known collector."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return list(SPECS)
    bad = [n for n in names if n not in SPECS]
    if bad:
        raise ValueError(f"unknown probe or collector {', '.join(bad)} "
                         f"(known: {', '.join(SPECS)})")
    return list(dict.fromkeys(names))


def why_skip(spec: Spec) -> str | None:
    """Why this collector cannot run here, or None."""
    if spec.kind == "probe":
        why = (_probes.why_cannot_bcc() if spec.engine == "bcc"
               else _probes.why_cannot_trace())
        if why:
            return why
        path = _probes.probes_dir() / spec.script
        if not path.exists():
            return f"{path} does not exist in this checkout"
    if spec.kind == "capture":
        from mongoprobe.pcap.capture import why_cannot_capture
        why = why_cannot_capture()
        if why:
            return why
    if spec.tool and not shutil.which(spec.tool):
        return f"{spec.tool} is not installed (run scripts/setup.sh)"
    return None


def _now() -> float:
    return round(time.time(), 6)


class Collector:
    """One collector of a run; ``info`` is its manifest entry."""

    def __init__(self, spec: Spec, ctx: Context):
        self.spec, self.ctx = spec, ctx
        self.info: dict = {"kind": spec.kind, "output": spec.output, "format": spec.fmt,
                           "status": "pending", "argv": None, "stderr": None,
                           "started": None, "ready": None, "stopped": None, "died_at": None,
                           "returncode": None, "error": None, "note": None}
        self.child: Child | None = None
        self._stopping = False

    @property
    def name(self) -> str:
        return self.spec.name

    # --- start ---------------------------------------------------------------------

    def start(self) -> None:
        """Start it and wait until it is attached (or failed); never raises."""
        why = why_skip(self.spec)
        if why:
            self.info.update(status="skipped", note=why)
            return
        try:
            if self.spec.kind == "capture":
                self._start_capture()
            else:
                self._start_process()
        except (OSError, RuntimeError) as e:   # cannot start (ProbeError, CaptureError...):
            # recorded, the run goes on
            self.info.update(status="failed", error=f"{type(e).__name__}: {e}")
            if self.child is not None:
                self.child.kill()

    def _start_process(self) -> None:
        spec, ctx = self.spec, self.ctx
        argv = spec.argv(ctx)
        self.info["argv"] = argv
        out = open(ctx.run_dir / spec.output, "w")
        err_name = f"{spec.name}.err"
        err = open(ctx.run_dir / err_name, "w")
        self.info["stderr"] = err_name

        self.info["started"] = _now()
        bpftrace = spec.kind == "probe" and spec.engine == "bpftrace"
        self.child = Child(argv, {**spec.env_default,
                                  **(spec.env_sized(ctx) if spec.env_sized else {}),
                                  **os.environ, **spec.env},
                           spec.ready, stdout=out, stderr=err,
                           # bpftrace 0.17 misses a SIGINT that lands between two polls
                           # (a probe that prints nothing until its end, such as
                           # profile.bt, then traces on until it is killed, its output
                           # cut): asked again while it still polls, as the runner does
                           ask_again=_probes.ASK_AGAIN if bpftrace else None,
                           progress=_probes.slice_progress(argv) if bpftrace else None)
        self.info["pid"] = self.child.pid
        state = self.child.wait_ready(spec.attach_timeout)
        if state == "exited":
            self.info.update(status="failed", returncode=self.child.proc.returncode,
                             stopped=_now(),
                             error=f"exited before it was ready: {self.error_line()}")
            return
        if state == "timeout":
            self.info.update(status="running",
                             note=f"no ready line after {spec.attach_timeout:.0f}s; "
                                  "kept running")
            return
        self.info.update(status="running", ready=_now())
        if spec.name == "latency":
            # what the sized maps take (--max-connections), as the kernel accounts it
            try:
                self.info.update(max_connections=ctx.max_connections,
                                 map_bytes=_probes.map_memory(self.child.pid)[0])
            except OSError:
                pass
        if spec.env_sized:
            # bpftrace may ignore the variable that sizes its maps (0.27 reads only
            # the newer name): maps of 4,096 keys would fill
            env = spec.env_sized(ctx)
            keys = int(env.get("BPFTRACE_MAX_MAP_KEYS", 0))
            wrong = keys and _probes.bpftrace_size_mismatch(self.child.pid, keys, env)
            if wrong:
                self.child.kill()
                self.info.update(status="failed", stopped=_now(), error=wrong,
                                 sizing_error=True)

    def _start_capture(self) -> None:
        from mongoprobe.pcap.capture import Capture

        if self.ctx.port is None:
            raise RuntimeError("the target's port is unknown (give --port)")
        path = self.ctx.run_dir / self.spec.output
        self.capture = Capture(str(path), port=self.ctx.port)
        self.info["argv"] = self.capture.command()
        self.info["started"] = _now()
        self.capture.start()
        self.info.update(status="running", ready=_now())

    # --- while running -------------------------------------------------------------

    def stderr_lines(self) -> list[str]:
        """What it has said on stderr so far (its first lines, and its last)."""
        return self.child.said() if self.child is not None else []

    def error_line(self) -> str:
        """The tracer's own error (probes.tracer_error), else its exit status."""
        said = _probes.tracer_error(self.stderr_lines())
        if said and self.spec.kind == "probe":
            said = (f"{_probes.tracer_label(self.spec.engine)} cannot run "
                    f"{self.spec.script}: "
                    + said.replace(f"{_probes.probes_dir().parent}{os.sep}", ""))
        return said or f"exit status {self.child.proc.returncode if self.child else '?'}"

    def check(self, target_gone: bool = False) -> str | None:
        """If it died since the last check, record that and return a one-line note.

        With ``target_gone``, a collector of the target pid that ended (pidstat does
        when its pid exits) is ``stopped``, not ``died``."""
        if self.info["status"] != "running" or self._stopping:
            return None
        if self.spec.kind == "capture":
            if self.capture.running:
                return None
            res = self.capture.stop()
            died = _now()
            self.info.update(status="died", died_at=died, stopped=died,
                             returncode=res.returncode, packets=res.packets,
                             dropped=res.dropped,
                             error=f"tshark exited: {res.stderr.strip().splitlines()[-1:]}")
            return f"{self.name} died"
        if self.child is None:
            return None
        rc = self.child.proc.poll()
        if rc is None:
            return None
        self.child.wait_output(2)
        died = _now()
        how = f"signal {-rc}" if rc < 0 else f"status {rc}"
        if target_gone and (self.spec.kind == "probe" or self.spec.name == "pidstat"):
            self.info.update(status="stopped", stopped=died, returncode=rc,
                             note=f"ended with the target ({how})")
            return f"{self.name} ended with the target"
        self.info.update(status="died", died_at=died, stopped=died, returncode=rc,
                         error=f"exited with {how}: {self.error_line()}")
        return f"{self.name} died ({how})"

    # --- stop ----------------------------------------------------------------------

    def stop(self, timeout: float = 60.0) -> None:
        if self.info["status"] != "running":
            return
        self._stopping = True
        if self.spec.kind == "capture":
            try:
                res = self.capture.stop(timeout)
                self.info.update(status="stopped", stopped=_now(), returncode=res.returncode,
                                 packets=res.packets, dropped=res.dropped)
            except (OSError, RuntimeError) as e:     # CaptureError: tshark misbehaved
                self.info.update(status="failed", stopped=_now(),
                                 error=f"stop: {type(e).__name__}: {e}")
            return
        if self.child.proc.poll() is not None:     # it ended on its own just now
            self._stopping = False
            self.check()
            return
        if self.child.stop(timeout):
            # its output may end inside a record: the run's readers say so, not guess
            self.info.update(note=f"did not end {timeout:.0f}s after SIGINT; killed "
                                  "(its output is cut)", cut=True)
        self.child.wait_output(10)
        self.info.update(status="stopped", stopped=_now(),
                         returncode=self.child.proc.returncode)


def unlimited_memlock() -> None:
    """Raise RLIMIT_MEMLOCK for us and the children: bpftrace warns "couldn't set RLIMIT_MEMLOCK"."""
    try:
        resource.setrlimit(resource.RLIMIT_MEMLOCK,
                           (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    except (ValueError, OSError):
        pass


def start_all(names: list[str], ctx: Context) -> list[Collector]:
    """Start the collectors side by side (bpftrace compiles take seconds each)."""
    unlimited_memlock()
    cols = [Collector(spec_for(n, ctx), ctx) for n in names]
    threads = [threading.Thread(target=c.start, daemon=True) for c in cols]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return cols


def stop_all(cols: list[Collector], timeout: float = 60.0) -> None:
    threads = [threading.Thread(target=c.stop, args=(timeout,), daemon=True) for c in cols]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def events_to_parquet(run_dir: Path, offset_ns: int, pid: int,
                      batch: int = 1_000_000) -> Path | None:
    """Move the latency probe's event maps out of ``latency.bt.json`` into
    ``latency.events.parquet`` (the wire_events table, wall-clock times); the JSON file
    keeps the rest. None when there were no event lines. Streamed: ``batch`` events at
    a time become a row group (an hour at 50k req/s is 180M events)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mongoprobe.formats import wire_events
    from mongoprobe.formats.bpftrace_latency import BpftraceLatency
    from mongoprobe.formats.wire_slices import events_frame

    src = Path(run_dir) / "latency.bt.json"
    if not src.exists():
        return None
    out = Path(run_dir) / "latency.events.parquet"
    tmp, part = src.with_suffix(".json.tmp"), out.with_suffix(".parquet.tmp")
    reader, writer = BpftraceLatency(str(src)), None

    def flush() -> None:
        nonlocal writer
        if not reader.events:
            return
        table = pa.Table.from_pandas(
            wire_events.from_mono(events_frame(reader.events), Clock(offset_ns), pid),
            preserve_index=False)
        if writer is None:
            writer = pq.ParquetWriter(part, table.schema, compression="zstd")
        writer.write_table(table)
        reader.events.clear()

    try:
        with open(src) as fh, open(tmp, "w") as kept:
            for line in fh:
                if not line.endswith("\n"):        # cut by a killed probe
                    continue
                # a second's events, and the compressed requests' bytes that name
                # them (printed just before them)
                if line.startswith(tuple(f'{{"type": "map", "data": {{"@{m}{i}"'
                                         for m in ("events", "zbody", "e", "z")  # (e, z: before
                                         for i in range(3))):                    # the names)
                    reader.feed(line)
                    if len(reader.events) >= batch:
                        flush()
                else:
                    kept.write(line)
            flush()
    finally:
        if writer is not None:
            writer.close()
    if writer is None:
        tmp.unlink()
        return None
    os.replace(part, out)
    os.replace(tmp, src)
    return out


def bcc_events_to_parquet(run_dir: Path, offset_ns: int, pid: int) -> Path | None:
    """mongolatency.py's raw events (BCC_EVENTS) as ``latency.events.parquet`` (the
    wire_events table, wall-clock times), the raw file removed; None without it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from mongoprobe.formats import wire_events
    from mongoprobe.formats.wire_slices import read_raw_events

    src = Path(run_dir) / BCC_EVENTS
    if not src.exists():
        return None
    with open(src, "rb") as fh:
        frame = read_raw_events(fh, str(src))[1]
    out = Path(run_dir) / "latency.events.parquet"
    pq.write_table(pa.Table.from_pandas(wire_events.from_mono(frame, Clock(offset_ns), pid),
                                        preserve_index=False), out, compression="zstd")
    src.unlink()
    return out


def compress(path: Path, level: int = 10) -> Path:
    """``path`` as ``path.zst`` (zstd, streamed), the original removed: what record does
    to the latency probe's JSON at the end of a run (its per-second histograms repeat
    the same keys each second: about 9 times smaller; ``rundir`` reads either)."""
    import zstandard

    out = Path(str(path) + ".zst")
    tmp = Path(str(out) + ".tmp")
    with open(path, "rb") as src, open(tmp, "wb") as dst:
        zstandard.ZstdCompressor(level=level).copy_stream(src, dst)
    os.replace(tmp, out)
    os.unlink(path)
    return out

