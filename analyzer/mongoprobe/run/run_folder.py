"""The run directory ``mongoprobe record`` writes, and ``load_run`` that reads it.

Layout of RUN/ (every file is the tool's own output, kept as it came)::

    manifest.json        what ran, where, when; versions; clocks; collector status
    load.out             the command's stdout and stderr, one line per line it printed:
                         ``EPOCH<TAB>STREAM<TAB>TEXT`` (EPOCH: wall seconds when record
                         received the line, 6 decimals; STREAM: stdout | stderr)
    load.stdout          the command's stdout exactly as printed (for foreign parsers)
    latency.bt.json.zst  mongo_latency.bt under ``bpftrace -f json``: per second and
                         command, a log-linear latency histogram, count, sum, max; the
                         loss counters (formats/bpftrace_latency.py); zstd-compressed
                         by record at the end (``latency.bt.json`` while it runs, and
                         in runs cut short, is read the same)
    latency.bcc.jsonl.zst  the same from bcc (``record --engine bcc``, the default where
                         bcc compiles): mongolatency.py --slices, a JSON line a second
                         and the final counters (formats/wire_slices.py)
    latency.events.parquet  with ``record --events``: every request (or one in N), the
                         wire_events table (formats/wire_events.py)
    profile.bt.txt ...   the other bpftrace probes' text output (profile, offcpu, flush,
                         syscount, threads)
    vmstat.txt           vmstat -n -t INTERVAL
    iostat.txt           iostat -x -t INTERVAL, ISO times
    pidstat.txt          pidstat -u -d -w -r -h -H -p PID INTERVAL, epoch times
    capture.pcapng       packet capture of the target's port (mongoprobe.pcap.capture)
    NAME.err             each collector's stderr
    metrics.before.txt   FerretDB /debug/metrics before the collectors started and
    metrics.after.txt    after they stopped (when the target's metrics URL is known)
    target.log           the embedded FerretDB's log (--target embedded)

manifest.json keys::

    format, version      "mongoprobe-run", 1
    status               running | complete (written at start, rewritten at the end)
    record_argv          mongoprobe record's own command line
    command              {argv, pid, env (what record added), start, end, returncode}
    ended_by             command | interrupt | target_exit
    start, end           wall clock, epoch seconds
    clock                {start: {realtime_ns, monotonic_ns, offset_ns},
                          end: {...}, drift_ns}: wall_ns = monotonic_ns + offset_ns
                         (bpftrace's nsecs is CLOCK_MONOTONIC)
    latency_engine       {engine, why}: the latency probe's tracer, and why it was chosen
    latency_sizing       {script, max_connections, default_lowered, cpus,
                          map_bytes_computed}: the maps' kernel memory computed before
                          loading (mapmem), for the possible CPUs
    interval             seconds between collector samples
    latency_events_every the latency probe's events: 0 none, 1 every request, N one in N
    host                 {hostname, cpus, cpu_model, mem_total_kb, os}
    kernel               {release, version, machine}
    tools                {bpftrace, perf, tshark, vmstat, sysstat, python, pandas,
                          pymongo, mongoprobe, ferretdb} (None when absent)
    target               {kind: embedded | pid, pid, exe, cmdline, uri, metrics_url,
                          port, version, exited_at}
    probes_requested     the --probes list
    labels               {KEY: VALUE} of record --label (what the run varies)
    collectors           {NAME: {kind, output, format, status (running | stopped |
                          skipped | failed | died), argv, pid, stderr, started, ready,
                          stopped, died_at, returncode, error, note}}
    metrics              {url, before, after}: FerretDB's request counts,
                          [{opcode, command, count}]
    notes                [{time, what}]: what happened during the run, in order
    files                {key: file name} for every file above that exists

``load_run(path)`` returns a :class:`Run`; its tables are parsed on first use.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

from mongoprobe import progress
from mongoprobe.model.clock import Clock
from mongoprobe.model.phase import phases_from
from mongoprobe.wire.facts import answered_line

# pandas is imported where a table is built: ``import mongoprobe`` (every CLI call)
# imports this module for load_run.

MANIFEST = "manifest.json"
LOAD_OUT = "load.out"
LOAD_STDOUT = "load.stdout"
PHASE_COLUMNS = ["name", "start", "end"]
PROGRESS_BYTES = 32 << 20     # reading a bigger probe output shows progress on a terminal


def write_manifest(run_dir: Path, manifest: dict) -> None:
    """Atomically (a reader never sees half a file)."""
    tmp = Path(run_dir) / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, Path(run_dir) / MANIFEST)


class Run:
    """A recorded run. Attributes (tables parsed lazily, on first use):

    path            Path of the run directory
    manifest        dict (manifest.json)
    files           {key: Path} of every raw output present (collector names, load_out,
                    load_stdout, metrics_before, metrics_after, target_log, NAME_err)
    offset_ns       CLOCK_REALTIME - CLOCK_MONOTONIC at the start (int)
    latencies       the server-side latency (``mongoprobe.model.latencies.Latencies``) the
                    latency probe measured: per-second histograms, counters, events
    events          its wire_events table (``time`` in wall seconds) when the run kept
                    events (``record --events``), else None; more than
                    ``event_store.IN_MEMORY_MAX`` raise TooManyEvents (the figures read
                    them in batches: ``latencies.source``)
    latency_counts  {command: requests} as the latency probe counted them in-kernel
    load_lines      the command's output: time (receive, wall s), stream, text
    load            mongoprobe_load.LoadOutput when the command was ``mongoprobe load``
                    (else None)
    load_intervals  the load's interval table (empty when not mongoprobe load)
    load_summary    the load's summary dict (None when absent)
    tool_output     the load tool's output read by mongoprobe.loadtools: phases,
                    per-interval rates, client latency (or phases from the traffic)
    tool_tried      the adapters that refused the output, and why
    phases          name, start, end (wall seconds), tool, label (tool_output's)
    lost            the latency probe's loss counters and collectors that died
    metrics_delta   {command: requests} FerretDB counted during the run (or None)
    vmstat, iostat, pidstat   the collectors' tables (formats/<name>.py, raw: the
                    first sample is since boot)
    ycsb, ycsb_summary        YCSB's status lines and summary, when it was the command
    (LookupError when the run lacks the output;
                    FormatError when the output is not that format)
    """

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        mpath = self.path / MANIFEST
        try:
            self.manifest: dict = json.loads(mpath.read_text())
        except FileNotFoundError:
            raise FileNotFoundError(f"{mpath}: no manifest (not a mongoprobe run directory)")
        except ValueError as e:
            raise ValueError(f"{mpath}: not JSON: {e}")
        self._stack_tables: dict = {}
        # where the recording was found cut, one line each (said with the losses)
        self.cut: list[str] = []
        if "end" not in self.manifest:
            self.cut.append(f"{mpath.name}: no end (record did not finish: killed, or "
                            "still running): read up to the last line of each file")

    def __repr__(self) -> str:
        return f"Run({str(self.path)!r}, status={self.manifest.get('status')!r})"

    # --- files and clocks ----------------------------------------------------------

    @functools.cached_property
    def files(self) -> dict[str, Path]:
        out: dict[str, Path] = {}
        for key, name in self.manifest.get("files", {}).items():
            if name and (self.path / name).exists():
                out[key] = self.path / name
        for name, c in self.manifest.get("collectors", {}).items():
            for key, fname in ((name, c.get("output")), (f"{name}_err", c.get("stderr"))):
                if fname and (self.path / fname).exists():
                    out.setdefault(key, self.path / fname)
        return out

    def file(self, key: str) -> Path | None:
        return self.files.get(key)

    def stack_table(self, which: str):
        """The stack-sample table of the run's ``which`` output (profile, offcpu) at full
        time resolution (``stack_samples.load(path, bucket=None)``), a copy for each
        caller: parsed once per Run (a busy run's off-CPU print is tens of MB, read by
        the losses and the verdict). LookupError without that output."""
        from mongoprobe.model.stack_samples import load
        if which not in self._stack_tables:
            p = self.file(which)
            if p is None:
                raise LookupError(f"{self.path}: no {which} output in this run")
            self._stack_tables[which] = load(p, bucket=None)
        return self._stack_tables[which].copy()     # (attrs deep-copied with it)

    @functools.cached_property
    def clock(self) -> Clock:
        """The run's clock offset, measured when the recording started."""
        return Clock.of(self.manifest["clock"]["start"])

    @property
    def offset_ns(self) -> int:
        return self.clock.offset_ns

    def wall(self, monotonic_ns: float) -> float:
        """CLOCK_MONOTONIC nanoseconds (bpftrace nsecs) -> wall seconds."""
        return self.clock.wall_s(monotonic_ns)

    # --- the latency probe ---------------------------------------------------------

    @functools.cached_property
    def latencies(self):
        """The server-side latency model (``mongoprobe.model.latencies``) of this run: the
        latency probe's seconds, its counters, its events when kept. LookupError when
        the run has no latency probe."""
        from mongoprobe.model.event_store import ParquetEvents
        from mongoprobe.formats import wire_events
        from mongoprobe.formats.bpftrace_latency import BpftraceLatency
        from mongoprobe.formats.wire_slices import events_frame
        from mongoprobe.model.latencies import Latencies

        p = self.file("latency")
        if p is None:
            raise LookupError(f"{self.path}: no latency probe output in this run")
        if p.name.startswith("latency.bcc"):
            return self._bcc_latencies(p)
        r, slices = BpftraceLatency(str(p)), []
        size = os.path.getsize(p)
        line = progress.Line(f"{p.name}: reading", size, "B",
                             active=None if size > PROGRESS_BYTES else False)
        with open(p, "rb") as raw:
            for n, text in enumerate(_complete_lines(text_of(raw, p), p)):
                slices.extend(r.feed(text))
                if n % 4096 == 0:
                    line.update(raw.tell())     # of the file's bytes (compressed or not)
        line.close()
        slices.extend(r.close())
        if not r.ended:
            self.cut.append(f"{p.name}: no @end after its last second (the file is cut): "
                            "its counters are as they stood then")
        every = int(self.manifest.get("latency_events_every") or 0)
        ev = None
        if self.file("latency_events") is not None:
            # read in batches as figures need them, never all at once
            ev = ParquetEvents(self.file("latency_events"))
        elif r.events:      # a run cut before record moved them
            ev = wire_events.from_mono(events_frame(r.events), self.clock,
                                       int((self.manifest.get("target") or {}).get("pid") or 0))
        lost = r.lost_given(len(ev) if ev is not None else 0)
        return Latencies.from_slices(slices, self.clock, ev, r.counts, lost,
                                     events_complete=every == 1 and ev is not None
                                     and len(ev) == r.counts["replies"],
                                     answered_no_reply=r.answered_no_reply)

    def _bcc_latencies(self, p: Path):
        """record --engine bcc: mongolatency.py --slices' lines, its final counters
        (a cut run: the last slice's), events from Parquet."""
        from mongoprobe.model.event_store import ParquetEvents
        from mongoprobe.formats.wire_slices import COUNT_KEYS, LOST_KEYS, BccSlices
        from mongoprobe.model.latencies import Latencies

        r, slices = BccSlices(p.name), []
        with open(p, "rb") as raw:
            for text in _complete_lines(text_of(raw, p), p):
                s = r.feed(text)
                if s is not None:
                    slices.append(s)
        final = r.final or {}
        if r.final is None:
            self.cut.append(f"{p.name}: no end line after its last slice (the file is cut):"
                            " its counters are the last slice's")
        last = slices[-1] if slices else None
        counts = final.get("counts") or (dict(last.counts) if last else
                                         dict.fromkeys(COUNT_KEYS, 0))
        lost = final.get("lost") or (dict(last.lost) if last else dict.fromkeys(LOST_KEYS, 0))
        ev = (ParquetEvents(self.file("latency_events"))
              if self.file("latency_events") is not None else None)
        every = int(self.manifest.get("latency_events_every") or 0)
        return Latencies.from_slices(slices, self.clock, ev, counts, lost,
                                     events_complete=every == 1 and ev is not None
                                     and len(ev) == counts["replies"],
                                     answered_no_reply=final.get("answered_no_reply"))

    @property
    def events(self) -> pd.DataFrame | None:
        """The kept events as one table (None when the run kept none;
        ``event_store.TooManyEvents``, a LookupError, when they are too many to hold
        in memory)."""
        return self.latencies.events if self.file("latency") is not None else None

    @property
    def latency_counts(self) -> dict[str, int]:
        t = self.latencies.totals
        req = t.groupby("command")[["count", "noreply"]].sum().sum(axis=1)
        return {str(k): int(v) for k, v in req.items() if v}

    # --- the load ------------------------------------------------------------------

    @functools.cached_property
    def load_lines(self) -> pd.DataFrame:
        from mongoprobe.formats.loadout import read_load_out

        p = self.file("load_out")
        if p is None:
            return read_load_out([])
        with open(p) as fh:
            return read_load_out(fh)

    @functools.cached_property
    def load(self):
        from mongoprobe.formats import mongoprobe_load

        p = self.file("load_out")
        if p is None:
            return None
        text = p.read_text()
        if not mongoprobe_load.is_mongoprobe_load(text):
            return None
        return mongoprobe_load.parse_mongoprobe_load(text.splitlines(), str(p))

    @property
    def load_intervals(self) -> pd.DataFrame:
        import pandas as pd
        from mongoprobe.formats import mongoprobe_load

        if self.load is None:
            return pd.DataFrame(columns=mongoprobe_load.INTERVAL_COLUMNS)
        return self.load.intervals

    @property
    def load_summary(self) -> dict | None:
        return self.load.summary if self.load is not None else None

    @functools.cached_property
    def _tool(self):
        """(ToolOutput, [(adapter, why it refused)]): the load tool's output read by the
        first adapter that recognises it (``mongoprobe.loadtools``); else phases from
        the server's traffic (``mongoprobe.analysis.traffic_phases``); else one phase ``run``."""
        from mongoprobe import loadtools
        from mongoprobe.analysis import traffic_phases as traffic

        source = str(self.file("load_out") or f"{self.path}/{LOAD_OUT}")
        found, tried = loadtools.read_output(self.load_lines, source)
        if found is not None:
            return found, tried
        lat = self.latencies if self.file("latency") is not None else None
        ph = traffic.infer(lat) if lat is not None else None
        if ph is not None and len(ph):
            rows = [[p.name, p.start, p.end, "traffic", ""] for p in phases_from(ph)]
            return loadtools.ToolOutput("traffic", loadtools.frame(
                rows, loadtools.PHASE_COLUMNS), notes=[
                "phases found in the server's traffic (its per-second command mix): "
                "no adapter recognised the tool's output and it prints no markers"]), tried
        cmd = self.manifest.get("command") or {}
        start = cmd.get("start") or self.manifest.get("start")
        end = cmd.get("end") or self.manifest.get("end")
        why = ("the run has no latency probe to find phases in its traffic"
               if lat is None else "the server saw no work requests")
        return loadtools.ToolOutput("command", loadtools.frame(
            [["run", start, end, "command", " ".join(cmd.get("argv") or [])]],
            loadtools.PHASE_COLUMNS), notes=[f"one phase, the whole command: {why}"]), tried

    @property
    def tool_output(self):
        """The load tool's phases, rates and client latency (``loadtools.ToolOutput``)."""
        return self._tool[0]

    @property
    def tool_tried(self) -> list[tuple[str, str]]:
        """(adapter, why it refused the output) for each adapter tried before the one
        that read it (all of them when none did)."""
        return self._tool[1]

    @property
    def phases(self) -> pd.DataFrame:
        """name, start, end (wall seconds), tool, label: from the load tool's output
        (``tool_output``). A phase never ended ends with the command."""
        df = self.tool_output.phases.copy()
        cmd_end = (self.manifest.get("command") or {}).get("end") or self.manifest.get("end")
        if cmd_end is not None:
            df["end"] = df["end"].fillna(float(cmd_end))
        return df

    @property
    def lost(self) -> dict:
        """What the run lost: ``probe`` (the latency probe's counters, None without
        one) and ``collectors`` that died, failed or were skipped (name, status,
        died_at in seconds from the start, why); ``cut``: where the recording was
        found cut (the manifest without an end, a probe's file without its last line);
        and, not a loss but said beside them,
        ``answered_no_reply``: {command: replies} the server sent to requests that
        asked for none."""
        probe = dict(self.latencies.lost) if self.file("latency") is not None else None
        # not lost: the server's replies to requests that asked for none, per command
        answered = (dict(self.latencies.answered_no_reply)
                    if self.file("latency") is not None else {})
        t0 = self.manifest.get("start") or 0.0
        bad = []
        for name, c in (self.manifest.get("collectors") or {}).items():
            if c.get("status") in ("died", "failed", "skipped") or c.get("cut"):
                died = c.get("died_at")
                bad.append({"name": name, "status": "cut" if c.get("cut") else c["status"],
                            "died_at": None if died is None else died - t0,
                            "why": c.get("error") or c.get("note") or ""})
        return {"probe": probe, "collectors": bad, "stacks": self._stack_losses(),
                "answered_no_reply": answered, "cut": list(self.cut)}

    def _stack_losses(self) -> dict:
        """{profile|offcpu: {samples, folded, empty, lookup_failed, unit[, unreadable]}} for each
        stack probe of the run: what its own counter saw (``samples``: @samples_total,
        or offcpu.bt's @offcpu_us_total, in the unit of the values folded; None
        without one: an offcpu.bt that counted only switches), what was folded, and
        the stacks bpftrace printed empty or could not look up (its stderr, ``NAME.err``)."""
        from mongoprobe.formats.bpftrace_stacks import lookup_failures
        from mongoprobe.formats.errors import FormatError

        out = {}
        for which, total in (("profile", "samples_total"), ("offcpu", "offcpu_us_total")):
            p = self.file(which)
            if p is None:
                continue
            try:
                df = self.stack_table(which)
            except FormatError as e:    # e.g. cut by a killed collector: nothing folded
                out[which] = {"samples": None, "folded": None, "empty": 0,
                              "lookup_failed": 0, "unit": None, "unreadable": str(e)}
                continue
            stats, meta = df.attrs.get("stats", {}), df.attrs.get("meta", {})
            err = self.path / f"{which}.err"
            failed = (lookup_failures(err.read_text(errors="replace").splitlines())
                      if err.exists() else 0)
            out[which] = {"samples": (meta.get("scalars") or {}).get(total),
                          "folded": int(df["count"].sum()), "empty": int(stats.get("empty", 0)),
                          "lookup_failed": failed,
                          "unit": "us" if meta.get("unit") == "us" else "samples"}
        return out

    # --- FerretDB's own counts ------------------------------------------------------

    @property
    def metrics_delta(self) -> dict[str, int] | None:
        m = self.manifest.get("metrics") or {}
        if m.get("before") is None or m.get("after") is None:
            return None
        before = {(r["opcode"], r["command"]): r["count"] for r in m["before"]}
        out: dict[str, int] = {}
        for r in m["after"]:
            d = r["count"] - before.get((r["opcode"], r["command"]), 0)
            if d:
                out[r["command"]] = out.get(r["command"], 0) + d
        return out

    # --- foreign formats ----------------------------------------------------------

    def _foreign(self, fmt: str, src) -> pd.DataFrame:
        """Parse ``src`` (a path, or an open text) with the format registry's parser
        for ``fmt``; LookupError when this run has no such output."""
        import io

        from mongoprobe.formats import registry

        if src is None:
            raise LookupError(f"{self.path}: no {fmt} output in this run")
        source = str(src) if isinstance(src, Path) else f"{self.path}/load.out"
        arg = str(src) if isinstance(src, Path) else io.StringIO(src)
        return registry.parse(fmt, arg, source)

    @functools.cached_property
    def vmstat(self) -> pd.DataFrame:
        return self._foreign("vmstat", self.file("vmstat"))

    @functools.cached_property
    def iostat(self) -> pd.DataFrame:
        return self._foreign("iostat", self.file("iostat"))

    @functools.cached_property
    def pidstat(self) -> pd.DataFrame:
        return self._foreign("pidstat", self.file("pidstat"))

    def _all_output(self) -> str | None:
        # YCSB prints its status lines on stderr and its summary on stdout.
        if self.file("load_out") is None:
            return None
        return "".join(t + "\n" for t in self.load_lines["text"])

    @functools.cached_property
    def ycsb(self) -> pd.DataFrame:
        """YCSB's status lines (formats/ycsb.py) when the command was YCSB."""
        return self._foreign("ycsb", self._all_output())

    @functools.cached_property
    def ycsb_summary(self) -> pd.DataFrame:
        return self._foreign("ycsb-summary", self._all_output())


def text_of(raw, path: Path):
    """The text of a run's file opened as ``raw`` (binary), through zstd when record
    compressed it (``.zst``)."""
    import io

    if str(path).endswith(".zst"):
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(raw, closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8")


def _complete_lines(fh, path: Path):
    """Lines of a file a killed writer may have cut mid-line: the cut line is dropped.
    A file that does not decompress or decode is a ValueError naming it."""
    errors: tuple = (UnicodeDecodeError, OSError)
    if str(path).endswith(".zst"):
        import zstandard

        errors += (zstandard.ZstdError,)
    try:
        for line in fh:
            if line.endswith("\n"):
                yield line
    except errors as e:
        raise ValueError(f"{path}: unreadable ({e})") from None


def load_run(path: str | os.PathLike) -> Run:
    """The run recorded in ``path`` (see the module doc for what it holds)."""
    return Run(path)


def lost_line(lost: dict) -> str:
    """The losses of a run (:attr:`Run.lost`), one line per source, as the probes
    print them: what ``record`` says at its end, ``phases`` and ``report`` show."""
    out = []
    probe = lost.get("probe")
    if probe is None:
        out.append("lost: no latency probe in this run")
    else:
        out.append(f"lost: unmatched replies {probe['unmatched_replies']}, requests without "
                   f"reply {probe['requests_without_reply']}, malformed headers "
                   f"{probe['malformed']}, dropped events {probe['dropped']}")
        answered = lost.get("answered_no_reply") or {}
        if answered:
            # said beside the losses so that it is not read as one (wire.facts)
            out.append(answered_line(sum(answered.values()), answered)
                       + ": the server's replies, not a loss")
    for which, st in (lost.get("stacks") or {}).items():
        if st.get("unreadable"):
            out.append(f"lost: {which} stacks unreadable, none used: {st['unreadable']}")
            continue
        unit = " us" if st.get("unit") == "us" else ""        # offcpu: time, not samples
        of = f" of {st['samples']}{unit} counted" if st.get("samples") is not None else ""
        out.append(f"lost: {which} stacks folded {st['folded']}{unit}{of}, empty {st['empty']}, "
                   f"lookup failed {st['lookup_failed']}")
    out += [f"cut: {why}" for why in lost.get("cut") or ()]
    for c in lost.get("collectors", []):
        out.append(f"lost: collector {c['name']} {c['status']}"
                   + (f" at {c['died_at']:.1f} s" if c.get("died_at") is not None else "")
                   + (f": {c['why']}" if c.get("why") else ""))
    return "\n".join(out)
