"""The per-phase table of a recorded run: what the seeds' (docs/sources.md) authors did by hand.

``phase_table(run)`` returns one row per phase (DataFrame, columns below),
``phase_json(run)`` the ``mongoprobe phases --json`` shape (README.md lists its keys) and
``render(run_table)`` the shell tables. Every figure is computed here, once, from the
load tool's model (``mongoprobe.loadtools``: phases, per-interval per-operation
counts, the tool's client latency), the server's per-request events and the
collectors' tables, whatever the tool.

Throughput (the load tool's own counts; ``rate_units`` says what one operation is):
    name, start, end, tool    phase, its wall-clock bounds (epoch s), who named it
    seconds                   end - start
    ops_avg, ops_p95          all operations/s: mean over the phase, and the rate 95% of
                              the tool's full reporting intervals reach (``p95_rate``)
    ips_avg, ips_p95          the insert operation (YCSB INSERT; iibench and the built-in
                              load count documents): NaN when the tool ran none
    qps_avg, qps_p95          the query operations (READ, SCAN, query): the same
    rates, rates_p95          {OP: operations/s} per operation, as the tool names it
    ops_source                "tool"; "server" when the tool gives no rates (markers,
                              phases from traffic): ops are then the server's work
                              requests/s (``traffic.ADMIN_COMMANDS`` left out)
System (vmstat, iostat summed over devices; means of the samples inside the phase):
    r_s, rmb_s, wmb_s         storage reads/s, MB/s read and written
    cs, us, sy, us_sy         context switches/s, user/system CPU %
    r_per_op, rkb_per_op, wkb_per_op, cs_per_op, cpu_per_op   (seeds' r/o … (us+sy)/o)
    mcpu_per_op               seed 001's Mcpu/q: (us + sy) * 1e6 / ops
    cpu_us_per_op             CPU microseconds per operation (us+sy over all CPUs)
    (every per-operation figure divides by ops_avg: ``normalize.per_op``)
Server (pidstat of the target; the last sample of the phase):
    rss_mb                    resident set size at phase end
    db_mb                     database size at phase end (the built-in load's dbStats)
Latency, server side (the probe's requests answered in the phase: ``mongoprobe.model.latencies``;
nearest-rank percentiles, exact from events), in µs:
    latency_us                {command: {"count", "avg", "p50", "p95", "p99", "max"}}:
                              count the answered requests; "no_reply" too where some
                              were sent asking for none (moreToCome); the latency
                              figures None where none of the command was answered
    server_rates              {command: requests/s}
    server_s                  the seconds of the phase those figures cover: all of it
                              when the run kept every request (``record --events``),
                              else the probe's whole seconds inside it (an edge second
                              holds the traffic of the phase before or after)
    server_exact              True when they come from every request's event
    failed_replies            {command: {code: replies}} of the replies with ``ok: 0``
                              (code as a string, "-1": none readable;
                              ``mongoprobe.wire.error_codes`` names them); commands with no
                              failure left out, empty when the probe does not read replies
Latency, client side (what the tool reports), in µs:
    client_latency_us         {OP: {"count", "avg", "p50", "p95", "p99", "max"}}: None
                              where the tool gives none; ``client_how`` {OP: how}
                              (summary, bucket bound, status lines: loadtools)
    client_ms                 {OP: {"count", "p95_le_ms", "max_ms"}} for histogram
                              figures (the bucket bound 95% stayed under)
    client_vs_server          {OP: {"command", "client": {...}, "server": {...},
                              "diff": {stat: client - server}}}: the operation's
                              command on the server (READ<->find, UPDATE<->update,
                              INSERT<->insert, SCAN<->find, query<->find); the
                              difference is the network, the client's queueing and
                              its driver
Network (when the run has a packet capture beside the latency probe):
    network_us                {"matched", "network_p50", "network_p99", "server_p50",
                               "server_p99", "transport_p50", "transport_p99"} in µs
Profile (when the run has on-CPU stacks):
    categories                {category: share of samples}
"""

from __future__ import annotations

import math
import textwrap
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mongoprobe import loadtools
from mongoprobe.wire import error_codes as errorcodes, facts as wirefacts
from mongoprobe.model import latencies, phase
from mongoprobe.model.phase import Phase, phases_from
from mongoprobe.analysis import normalize, traffic_phases as traffic
from mongoprobe.run.run_folder import lost_line

NUMERIC = ["seconds", "server_s", "ops_avg", "ops_p95", "ips_avg", "ips_p95", "qps_avg",
           "qps_p95",
           "r_s", "rmb_s", "wmb_s", "cs", "us", "sy", "us_sy", "r_per_op", "rkb_per_op",
           "wkb_per_op", "cs_per_op", "cpu_per_op", "mcpu_per_op", "cpu_us_per_op",
           "rss_mb", "db_mb"]
DICTS = ["rates", "rates_p95", "rate_units", "latency_us", "server_rates", "failed_replies",
         "client_latency_us", "client_how", "client_ms", "client_vs_server", "network_us",
         "categories"]
STATS = ("count", "avg", "p50", "p95", "p99", "max")


class PhaseError(ValueError):
    """A mistaken request: a --phases spec that does not parse, an unknown phase."""


def optional_table(getter):
    """``getter()``'s table, or None when the run has no such output (``LookupError``,
    as ``rundir.Run`` raises for a collector that did not run) or it is empty. Any
    other failure -- a damaged file -- propagates: it is not a missing section."""
    try:
        df = getter()
    except LookupError:
        return None
    return df if df is not None and len(df) else None


def server_latency(run) -> latencies.Latencies | None:
    """The run's server latency, None when it has no latency probe."""
    try:
        return run.latencies
    except LookupError:
        return None


def parse_phases(spec: str, origin: float) -> pd.DataFrame:
    """``NAME=START..END,...`` -> (name, start, end). START and END are seconds from
    ``origin`` (the recording's start), or epoch seconds when above 1e9."""
    rows = []
    for part in spec.split(","):
        name, eq, span = part.strip().partition("=")
        lo, dots, hi = span.partition("..")
        try:
            a, b = float(lo), float(hi)
        except ValueError:
            a = b = math.nan
        if not name or not eq or not dots or math.isnan(a) or math.isnan(b):
            raise PhaseError(f"--phases: {part.strip()!r} is not NAME=START..END "
                             "(seconds from the recording's start, or epoch seconds)")
        a, b = (a if a > 1e9 else origin + a), (b if b > 1e9 else origin + b)
        if b <= a:
            raise PhaseError(f"--phases: {name} ends before it starts")
        rows.append(Phase(name, a, b))
    return phase.frame(rows)


@dataclass
class Inputs:
    """What the table is computed from, read once."""
    tool: loadtools.ToolOutput
    events: pd.DataFrame | None          # loaded only for a capture to join them with
    latency: latencies.Latencies | None
    vmstat: pd.DataFrame | None
    iostat: pd.DataFrame | None         # summed over the devices (iostat_totals)
    pidstat: pd.DataFrame | None
    ncpu: int | None


def inputs(run, phases: pd.DataFrame | None = None) -> Inputs:
    from mongoprobe.formats.iostat import iostat_totals

    tool = run.tool_output
    if phases is not None:
        tool = tool.with_phases(phases)
    lat = server_latency(run)
    io = optional_table(lambda: run.iostat)
    # summed once here, not again for each phase (system_means takes the totals)
    io = io if io is None or "devices" in io.columns else iostat_totals(io)
    return Inputs(tool, _capture_events(run, lat), lat, optional_table(lambda: run.vmstat),
                  io, optional_table(lambda: run.pidstat),
                  (run.manifest.get("host") or {}).get("cpus"))


# --- throughput ------------------------------------------------------------------------


def _throughput(iv: pd.DataFrame, seconds: float, units: dict) -> dict[str, Any]:
    """ops/ips/qps avg and p95, and per-operation rates, from a phase's intervals."""
    out: dict[str, Any] = {k: math.nan for k in ("ops_avg", "ops_p95", "ips_avg",
                                                  "ips_p95", "qps_avg", "qps_p95")}
    out.update(rates={}, rates_p95={}, rate_units={})
    if not len(iv) or not seconds > 0:
        return out

    def avg_p95(part: pd.DataFrame) -> tuple[float, float]:
        f = part[part["full"]]
        # the tool's own printed rate where it has one (its interval lengths may be
        # rounded), else count / length; operations of one interval add up
        rate = f["rate"].where(f["rate"].notna(), f["count"] / f["length_s"])
        per = rate.groupby(f["time"], sort=True).sum()
        return float(part["count"].sum()) / seconds, normalize.p95_rate(per)

    out["ops_avg"], out["ops_p95"] = avg_p95(iv)
    for role, key in (("insert", "ips"), ("query", "qps")):
        mine = iv[iv["op"].map(lambda o: loadtools.op_role(o)[0] == role)]
        if len(mine):
            out[f"{key}_avg"], out[f"{key}_p95"] = avg_p95(mine)
    for op, part in iv[iv["op"] != loadtools.ALL].groupby("op", sort=False):
        out["rates"][op], out["rates_p95"][op] = avg_p95(part)
        out["rate_units"][op] = units.get(op, "operations")
    return out


def work_commands(lat: latencies.Latencies) -> list[str]:
    """The commands of the server's work: every one seen but ``traffic.ADMIN_COMMANDS``."""
    return [c for c in lat.totals["command"].unique() if c not in traffic.ADMIN_COMMANDS]


def second_edges(phases: list[Phase]) -> np.ndarray:
    """Each whole second of the phases, and the second after it: the edges between
    which ``Latencies.answered`` counts their requests per second."""
    lo = [p.whole_seconds() for p in phases]
    lo = np.concatenate(lo) if lo else np.zeros(0)
    return np.concatenate([lo, lo + 1])


def _work_per_second(lat: latencies.Latencies, phases: list[Phase], work: list[str]
                     ) -> dict[str, np.ndarray]:
    """{phase: the server's ``work`` requests answered in each of its whole seconds},
    counted for every phase at once (a comparison's blocks are thousands of phases)."""
    secs = [p.whole_seconds() for p in phases]
    lo = np.concatenate(secs) if secs else np.zeros(0)
    per = sum((lat.answered(c, lo, lo + 1) for c in work), np.zeros(len(lo), dtype=np.int64))
    cuts = np.cumsum([len(x) for x in secs])[:-1]
    return {p.name: part for p, part in zip(phases, np.split(per, cuts))}


def _server_throughput(lat: latencies.Latencies | None, p: Phase, work: list[str],
                       per: np.ndarray) -> dict:
    """ops avg/p95 from the server's ``work`` requests (``per``: in each whole second of
    the phase, ``_work_per_second``), when the tool has none."""
    start, end = p.span
    if lat is None or not end > start:
        return {"ops_avg": math.nan, "ops_p95": math.nan}
    total = sum(s["count"] for c, s in lat.stats(start, end).items() if c in work)
    secs = lat.seconds(start, end)
    return {"ops_avg": total / secs if secs > 0 else math.nan,
            "ops_p95": normalize.p95_rate(per)}


# --- latency ---------------------------------------------------------------------------


def _server(lat: latencies.Latencies | None, start: float, end: float
            ) -> tuple[dict, dict]:
    """({command: stats µs}, {command: requests/s}) of the requests answered in
    [start, end)."""
    if lat is None:
        return {}, {}
    # (a command whose requests all asked for no reply has no latency: None stays;
    # no_reply is given where there are such requests)
    us = {cmd: {k: (int(v) if k in ("count", "no_reply") else None if v is None else v / 1e3)
                for k, v in st.items() if k != "no_reply" or v}
          for cmd, st in lat.stats(start, end).items()}
    return us, lat.rates(start, end)


def _client(cl: pd.DataFrame) -> tuple[dict, dict, dict]:
    """(client_latency_us, client_how, client_ms) of one phase's client rows."""
    lat, how, ms = {}, {}, {}
    for r in cl.itertuples(index=False) if len(cl) else ():     # (a block has none)
        d = {"count": r.count, "avg": r.avg_us, "p50": r.p50_us, "p95": r.p95_us,
             "p99": r.p99_us, "max": r.max_us}
        lat[r.op] = {k: (None if v is None or math.isnan(v) else
                         int(v) if k == "count" else float(v)) for k, v in d.items()}
        how[r.op] = r.how
        if r.how == "bucket bound" and not math.isnan(r.p95_us):
            ms[r.op] = {"count": int(r.count), "p95_le_ms": r.p95_us / 1e3,
                        "max_ms": r.max_us / 1e3}
    return lat, how, ms


# why a client percentile can be below the server's for the same requests
RANK_NOTE = ("a percentile's rank can differ: the server's is the ceil(q n)-th of n "
             "values (nearest rank); YCSB 0.17's HdrHistogram 2.1.4 takes the round(q n)-th, "
             "one earlier when the fraction of q n is under a half, so at a sparse tail the "
             "client's figure can be below the server's")


# why a client percentile can be below the server's when they cover different requests
COVER_NOTE = ("the client's figures and the server's cover different requests here: the "
              "server's only the phase's whole seconds (their counts differ)")


def _negative_diffs(t: pd.DataFrame, same_requests: bool) -> bool:
    return any(d["diff"].get(k, 0) < 0 for r in t.itertuples()
               for op, d in r.client_vs_server.items()
               if ("count" in d["diff"]) == same_requests
               and (not same_requests or r.client_how.get(op) != "bucket bound")
               for k in ("p50", "p95", "p99"))


def negative_percentile_diff(t: pd.DataFrame) -> bool:
    """Does a phase show a client percentile (an exact value) below the server's for
    the same requests (RANK_NOTE)?"""
    return _negative_diffs(t, same_requests=True)


def negative_diff_other_requests(t: pd.DataFrame) -> bool:
    """Does a phase show a client percentile below the server's where the two cover
    different requests (COVER_NOTE)?"""
    return _negative_diffs(t, same_requests=False)


def _versus(client: dict, server: dict, exact: bool = True) -> dict:
    """{OP: {"command", "client", "server", "diff"}} for operations with a command. The
    counts differ by design when the server's figures cover only the phase's whole
    seconds (``exact`` False): no count difference then."""
    out = {}
    for op, c in client.items():
        cmd = loadtools.op_role(op)[1]
        if cmd is None or cmd not in server:
            continue
        s = server[cmd]
        out[op] = {"command": cmd, "client": c, "server": s,
                   "diff": {k: c[k] - s[k] for k in STATS if c.get(k) is not None
                            and s.get(k) is not None and (exact or k != "count")}}
    return out


# --- the table -------------------------------------------------------------------------


def phase_table(run, phases: pd.DataFrame | None = None,
                per_second: bool = False) -> pd.DataFrame:
    """One row per phase (the module docstring); ``phases`` (name, start, end)
    replaces the tool's own; ``per_second``: the events' per-second counts will be
    asked for next (``interval_table``), count them in the same scan."""
    inp = inputs(run, phases)
    t = compute(inp, _categories(run, inp.tool.phases), _joined(run, inp.events),
                per_second)
    from mongoprobe.analysis import limiter
    # what limits each phase (limiter.py), kept beside the table for its views
    t.attrs["verdicts"] = limiter.verdicts(run, t)
    return t


def compute(inp: Inputs, cats: dict | None = None,
            joined: pd.DataFrame | None = None, per_second: bool = False) -> pd.DataFrame:
    """The table from its inputs (a tool's output alone gives its throughput and
    client columns): ``cats`` {phase: {category: share}}, ``joined`` capture pairs."""
    tool = inp.tool
    phases = phases_from(tool.phases)
    cats = cats or {}
    # each table read once for all the phases (a comparison's blocks are thousands)
    intervals = dict(iter(tool.intervals.groupby("phase", sort=False)))
    # (the phases whose throughput is the server's, per whole second)
    untimed = [p for p in phases if p.name not in intervals and p.end > p.start]
    if inp.latency is not None:
        # with events: every phase's figures in two scans of them, not three each
        # (interval_table reads the per-second counts for a tool without rates only)
        inp.latency.prepare([p.span for p in phases], second_edges(untimed),
                            per_second and not len(tool.intervals))
    info = tool.phase_info.set_index("phase")["db_size_bytes"].to_dict()
    system = normalize.SystemSamples(inp.vmstat, inp.iostat)
    client = dict(iter(tool.client.groupby("phase", sort=False)))
    work = work_commands(inp.latency) if inp.latency is not None else []
    work_seconds = (_work_per_second(inp.latency, untimed, work)
                    if inp.latency is not None else {})
    no_iv, no_cl = tool.intervals.iloc[:0], tool.client.iloc[:0]
    rows = []
    for p, tool_name in zip(phases, tool.phases["tool"]):
        start, end = p.span
        r: dict[str, Any] = {"name": p.name, "start": start, "end": end, "tool": tool_name,
                             "seconds": p.seconds}
        iv = intervals.get(p.name, no_iv)
        r.update(_throughput(iv, p.seconds, tool.units))
        r["ops_source"] = "tool"
        if not len(iv):
            r.update(_server_throughput(inp.latency, p, work, work_seconds.get(p.name)))
            r["ops_source"] = "server"
        sm = system.means(start, end)
        r.update({"r_s": sm["r/s"], "rmb_s": sm["rkB/s"] / 1024, "wmb_s": sm["wkB/s"] / 1024,
                  "cs": sm["cs"], "us": sm["us"], "sy": sm["sy"], "us_sy": sm["us"] + sm["sy"]})
        m = normalize.per_op(r["ops_avg"], r_s=sm["r/s"], rkb_s=sm["rkB/s"], wkb_s=sm["wkB/s"],
                             cs=sm["cs"], us=sm["us"], sy=sm["sy"], ncpu=inp.ncpu)
        r.update({"r_per_op": m["r/o"], "rkb_per_op": m["rkb/o"], "wkb_per_op": m["wkb/o"],
                  "cs_per_op": m["cs/o"], "cpu_per_op": m["(us+sy)/o"],
                  "mcpu_per_op": m["Mcpu/o"], "cpu_us_per_op": m["cpu_us/o"]})
        r["rss_mb"] = _rss_mb(inp.pidstat, start, end)
        r["db_mb"] = float(info.get(p.name, math.nan)) / 2**20
        r["latency_us"], r["server_rates"] = _server(inp.latency, start, end)
        r["server_s"] = inp.latency.seconds(start, end) if inp.latency else math.nan
        r["server_exact"] = bool(inp.latency is not None and inp.latency.exact)
        r["failed_replies"] = ({} if inp.latency is None else
                               {cmd: {str(c): n for c, n in sorted(codes.items())}
                                for cmd, codes in inp.latency.failures(start, end).items()})
        cl = client.get(p.name, no_cl)
        r["client_latency_us"], r["client_how"], r["client_ms"] = _client(cl)
        r["client_vs_server"] = _versus(r["client_latency_us"], r["latency_us"],
                                        r["server_exact"])
        r["categories"] = cats.get(p.name, {})
        r["network_us"] = _network(joined, p)
        rows.append(r)
    df = pd.DataFrame(rows, columns=["name", "start", "end", "tool", "ops_source",
                                     "server_exact", *NUMERIC, *DICTS])
    return df.astype({c: "float64" for c in NUMERIC} | {"name": str, "tool": str,
                                                         "ops_source": str,
                                                         "server_exact": bool})


def _rss_mb(pidstat: pd.DataFrame | None, start: float, end: float) -> float:
    if pidstat is None or "RSS" not in pidstat.columns or "time" not in pidstat.columns:
        return math.nan
    p = pidstat[(pidstat["time"] > start) & (pidstat["time"] <= end)]
    if not len(p):
        return math.nan
    return float(p["RSS"].iloc[-1]) / 1024.0     # pidstat prints kB


def _capture_events(run, lat: latencies.Latencies | None) -> pd.DataFrame | None:
    """The probe's events, for the join with the run's capture: None when the run has
    no capture or no events, or (said in one warning) too many events to join in
    memory."""
    if run.file("pcap") is None or lat is None or lat.source is None or not len(lat.source):
        return None
    from mongoprobe.model.event_store import TooManyEvents
    try:
        return lat.events
    except TooManyEvents as e:
        warnings.warn(f"{e}: network-side latency (the capture joined with the probe's "
                      "events) left out")
        return None


def _joined(run, events: pd.DataFrame | None) -> pd.DataFrame | None:
    """The probe's events joined with the capture's request/reply pairs, if both exist."""
    path = run.file("pcap")
    if path is None or events is None:
        return None
    from mongoprobe import pcap
    from mongoprobe.formats.errors import FormatError
    port = (run.manifest.get("target") or {}).get("port")
    try:
        msgs = pcap.messages(str(path), port)
    except FormatError as e:
        warnings.warn(f"{e}: network-side latency left out")
        return None
    j = pcap.join_with_probe(pcap.pairs(msgs), events)
    return j[j["matched"]]


def _network(joined: pd.DataFrame | None, p: Phase) -> dict:
    if joined is None:
        return {}
    j = joined[p.contains(joined["time"])]
    if not len(j):
        return {}
    out = {"matched": int(len(j))}
    for name in ("network", "server", "transport"):
        v = np.sort(j[f"{name}_ns"].to_numpy()) / 1e3
        out[f"{name}_p50"] = float(wirefacts.percentile(v, 50))     # nearest rank
        out[f"{name}_p99"] = float(wirefacts.percentile(v, 99))
    return out


def _categories(run, ph: pd.DataFrame) -> dict[str, dict[str, float]]:
    """Share of on-CPU samples per category and phase, when the run has a profile."""
    if run.file("profile") is None:
        return {}
    from mongoprobe.analysis import run_profile
    return run_profile.run_category_shares(run, phases_from(ph))


def interval_table(run, phases: pd.DataFrame | None = None) -> pd.DataFrame:
    """The tool's per-interval rates beside the server's, one row per interval and
    operation (for plots and notebooks)::

        phase, op str; time (interval end, wall s), length_s, rate (the tool's
        operations/s) float64; command str (the operation's server command, "" when
        none); server_rate float64 (that command's requests/s in the same interval,
        from the probe; NaN without one)

    A tool without rates (markers, phases from traffic) gives the server's per-second
    requests of each work command instead (op "", rate NaN)."""
    inp = inputs(run, phases)
    iv = inp.tool.intervals
    cols = {"phase": str, "op": str, "time": "float64", "length_s": "float64",
            "rate": "float64", "command": str, "server_rate": "float64"}
    if not len(iv):
        if inp.latency is None:
            return loadtools.frame([], cols)
        ps = traffic.per_second(inp.latency)
        rows = []
        for p in phases_from(inp.tool.phases):
            part = ps[(ps["second"] >= math.floor(p.start)) & (ps["second"] < p.end)]
            rows += [[p.name, "", float(sec + 1), 1.0, math.nan, cmd, float(n)]
                     for sec, cmd, n in zip(part["second"], part["command"], part["requests"])]
        return loadtools.frame(rows, cols)
    cmds = iv["op"].map(lambda o: loadtools.op_role(o)[1] or "")
    rate = iv["count"] / iv["length_s"].where(iv["length_s"] > 0)
    srv = np.full(len(iv), np.nan)
    if inp.latency is not None:
        for cmd in set(cmds) - {""}:
            sel = (cmds == cmd).to_numpy()
            hi, lo = iv["time"].to_numpy()[sel], (iv["time"] - iv["length_s"]).to_numpy()[sel]
            srv[sel] = inp.latency.answered(cmd, lo, hi) / iv["length_s"].to_numpy()[sel]
    return loadtools.frame(list(zip(iv["phase"], iv["op"], iv["time"], iv["length_s"], rate,
                                    cmds, srv)), cols)


# --- JSON ------------------------------------------------------------------------------


def _clean(v: Any) -> Any:
    if isinstance(v, float) and (math.isnan(v) or math.isinf(v)):
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def phase_json(run, phases: pd.DataFrame | None = None) -> dict:
    """``{"tool", "lost", "phases"}`` (README.md lists the keys)."""
    t = phase_table(run, phases)
    out = {"tool": tool_json(run, phases), "lost": run.lost,
           "phases": [{k: _clean(v) for k, v in rec.items()}
                      for rec in t.to_dict(orient="records")]}
    for p, v in zip(out["phases"], t.attrs["verdicts"]):
        p.update(_clean(v.json()))
    return out


def tool_json(run, phases: pd.DataFrame | None = None) -> dict:
    """Which tool's output the phases come from, and what was tried before it."""
    t = run.tool_output if phases is None else run.tool_output.with_phases(phases)
    return {"name": t.tool, "version": t.version or None, "notes": list(t.notes),
            "tried": [{"adapter": a, "why": w} for a, w in run.tool_tried]}


# --- shell tables ----------------------------------------------------------------------


def _num(v: Any, fmt: str, width: int) -> str:
    """A number for a column; ``-`` padded like one when there is none. A value too
    wide for the column loses its decimals, then takes a k/M/G suffix, so a row keeps
    its columns (20086.7 cs/o in a 6-wide column is ``20087``, 12345678 is ``12.3M``)."""
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return "-".rjust(width)
    s = format(v, f"{width}{fmt}")
    if len(s) > width:
        s = format(v, f"{width}.0f")
    if len(s) > width:
        div, suffix = next((d, x) for d, x in ((1e3, "k"), (1e6, "M"), (1e9, "G"), (1e12, "T"))
                           if abs(v) / d < 1000 or x == "T")
        s = f"{v / div:.3g}{suffix}".rjust(width)
    return s


def _size(v: float, width: int = 7) -> str:
    return _num(v, ".1f", width - 2) + "MB" if not math.isnan(v) else "-".rjust(width)


def render(t: pd.DataFrame, tool: dict | None = None, lost: dict | None = None) -> str:
    """Shell tables (< 80 columns): throughput, operations, system per operation,
    server latency, client vs server. ``tool``/``lost``: ``tool_json``, ``Run.lost``."""
    w = 14
    lines = []
    if tool is not None:
        lines.append(_prose(tool_line(tool)))
        lines.append("")
    if t.attrs.get("verdicts"):
        from mongoprobe.analysis import limiter
        lines += limiter.render(t.attrs["verdicts"], w).splitlines() + [""]
    lines.append(f"{'phase':{w}s} {'opsAvg':>7s} {'opsP95':>7s} {'ipsAvg':>7s} {'ipsP95':>7s}"
                 f" {'qpsAvg':>7s} {'qpsP95':>7s} {'dbSize':>7s} {'rssSize':>7s}")
    for r in t.itertuples():
        lines.append(f"{r.name[:w]:{w}s} {_num(r.ops_avg, '.0f', 7)} {_num(r.ops_p95, '.0f', 7)} "
                     f"{_num(r.ips_avg, '.0f', 7)} {_num(r.ips_p95, '.0f', 7)} "
                     f"{_num(r.qps_avg, '.0f', 7)} {_num(r.qps_p95, '.0f', 7)} "
                     f"{_size(r.db_mb)} {_size(r.rss_mb)}")
    if (t["ops_source"] == "server").any():
        lines.append(_prose("  (ops from the server's requests where the tool gives no rates: "
                            + ", ".join(t.loc[t["ops_source"] == "server", "name"]) + ")"))
    lines += ["", f"{'phase':{w}s} {'operation':16s} {'rate/s':>8s} {'p95/s':>8s}  "
                  f"{'server command':20s} {'req/s':>7s}"]
    probe = lost is None or lost.get("probe") is not None
    for r in t.itertuples():
        shown = set()
        for op, rate in r.rates.items():
            cmd, srv = server_rate(r.server_rates, op, probe)
            unit = r.rate_units.get(op, "operations")
            label = op if unit == "operations" else f"{op} ({_UNIT_WORDS.get(unit, unit)})"
            shown.add(cmd)
            lines.append(f"{r.name[:w]:{w}s} {label[:16]:16s} {_num(rate, '.1f', 8)} "
                         f"{_num(r.rates_p95.get(op), '.1f', 8)}  {(cmd or '-')[:20]:20s} "
                         f"{_num(srv, '.1f', 7)}")
        for cmd, srv in sorted(r.server_rates.items(), key=lambda kv: -kv[1]):
            if cmd in shown or cmd in traffic.ADMIN_COMMANDS:
                continue
            lines.append(f"{r.name[:w]:{w}s} {'-':16s} {'-':>8s} {'-':>8s}  {cmd[:20]:20s} "
                         f"{_num(srv, '.1f', 7)}")
    lines += ["", f"{'phase':{w}s} {'r/s':>6s} {'rMB/s':>6s} {'wMB/s':>6s} {'r/o':>6s} "
                  f"{'rKB/o':>6s} {'wKB/o':>6s} {'cs/o':>6s} {'us+sy':>6s} {'cpuus/o':>8s}"]
    for r in t.itertuples():
        lines.append(f"{r.name[:w]:{w}s} {_num(r.r_s, '.0f', 6)} {_num(r.rmb_s, '.1f', 6)} "
                     f"{_num(r.wmb_s, '.1f', 6)} {_num(r.r_per_op, '.2f', 6)} "
                     f"{_num(r.rkb_per_op, '.1f', 6)} {_num(r.wkb_per_op, '.1f', 6)} "
                     f"{_num(r.cs_per_op, '.1f', 6)} {_num(r.us_sy, '.1f', 6)} "
                     f"{_num(r.cpu_us_per_op, '.0f', 8)}")
    lines += ["", "server latency (the probe), us"]
    if len(t) and not t["server_exact"].all() and t["server_s"].notna().any():
        lines.append(_prose("  (per-second histograms: each phase's whole seconds, "
                            + ", ".join(f"{r.server_s:.0f} of {r.seconds:.1f} s"
                                        for r in t.itertuples()) + "; record --events "
                            "keeps every request, for exact counts)"))
    lines.append(f"{'phase':{w}s} {'command':20s} "
                 f"{'count':>7s} {'p50':>7s} {'p95':>7s} {'p99':>7s} {'max':>9s}")
    unanswered = []
    for r in t.itertuples():
        for cmd, d in sorted(r.latency_us.items(), key=lambda kv: -kv[1]["count"]):
            lines.append(f"{r.name[:w]:{w}s} {cmd[:20]:20s} {_num(d['count'], 'd', 7)} "
                         + " ".join(_num(d[k], ".0f", 7) for k in ("p50", "p95", "p99"))
                         + f" {_num(d['max'], '.0f', 9)}")
            if d.get("no_reply"):
                unanswered.append(f"{cmd} {d['no_reply']}"
                                  + ("" if len(t) == 1 else f" in {r.name}"))
    if unanswered:
        lines.append(_prose("  (sent with moreToCome, asking for no reply, so not timed: "
                            + ", ".join(unanswered) + ")"))
    if any("[compressed]" in r.latency_us for r in t.itertuples()):
        lines.append("  ([compressed]: OP_COMPRESSED requests; the probe's per-second "
                     "histograms cannot name the command inside: record --events does)")
    failed = [(r.name, cmd, codes) for r in t.itertuples()
              for cmd, codes in sorted(r.failed_replies.items())]
    if failed:
        lines += ["", "failed replies (ok: 0), per command and error code",
                  f"{'phase':{w}s} {'command':20s} {'failed':>7s}  codes"]
        for name, cmd, codes in failed:
            lines.append(f"{name[:w]:{w}s} {cmd[:20]:20s} {sum(codes.values()):7d}  "
                         + errorcodes.summary({int(c): n for c, n in codes.items()}))
    vs = [(r.name, op, r.client_how.get(op), d) for r in t.itertuples()
          for op, d in r.client_vs_server.items()]
    if vs:
        # as wide as the longest name (YCSB's INSERT-FAILED, a 20-character command)
        ow = min(24, max(len("operation"), *(len(op) for _, op, _, _ in vs)))
        cw = min(24, max(len("command"), *(len(d["command"]) for *_, d in vs)))
        lines += ["", "client (the tool's own) vs server (the probe) latency, us",
                  "  (diff: the network, the client's queueing, its driver)",
                  f"{'phase':{w}s} {'operation':{ow}s} {'command':{cw}s} {'stat':5s} "
                  f"{'client':>10s} {'server':>10s} {'diff':>10s}"]
        for name, op, how, d in vs:
            first = True
            for k in STATS:
                c = d["client"].get(k)
                if c is None:
                    continue
                head = (f"{name[:w]:{w}s} {op[:ow]:{ow}s} {d['command'][:cw]:{cw}s}" if first
                        else " " * (w + ow + cw + 2))
                first = False
                # a histogram's percentile is the bound of its bucket: at most this
                bound = "<=" if how == "bucket bound" and k in ("p50", "p95", "p99") else ""
                srv = d["server"].get(k)
                lines.append(f"{head} {k:5s} {(bound + format(c, '.0f')).rjust(10)} "
                             f"{_num(None if srv is None else float(srv), '.0f', 10)} "
                             f"{_num(float(d['diff'].get(k, math.nan)), '.0f', 10)}")
        if negative_percentile_diff(t):
            lines.append(_prose(f"  (a negative diff: {RANK_NOTE})"))
        if negative_diff_other_requests(t):
            lines.append(_prose(f"  (a negative diff: {COVER_NOTE})"))
    if lost is not None:
        lines += ["", _prose(lost_line(lost))]
    return "".join(s + "\n" for s in lines)


def _prose(text: str) -> str:
    """Notes and losses wrapped to the width of the tables (a table row is never
    wrapped: its columns would break)."""
    return "\n".join(textwrap.fill(s, 79, subsequent_indent="    ", break_on_hyphens=False)
                     for s in text.split("\n"))


_UNIT_WORDS = {"documents": "docs"}


def server_rate(server_rates: dict, op: str, probe: bool) -> tuple[str | None, float]:
    """(the server command of a tool's operation, its requests/s in the phase): a
    command the probe never saw in the phase ran 0 times, if there was a probe."""
    cmd = loadtools.op_role(op)[1]
    if cmd is None:
        return None, math.nan
    return cmd, server_rates.get(cmd, 0.0 if probe else math.nan)


def tool_line(tool: dict) -> str:
    if tool["name"] in loadtools.ADAPTERS:
        head = f"phases from the load tool's output: {tool['name']}"
        if tool["version"]:
            head += f" {tool['version']}"
    else:
        head = f"phases from {tool['name']}"
    tried = "; ".join(f"{t['adapter']} ({t['why']})" for t in tool["tried"])
    if tool["name"] not in loadtools.ADAPTERS and tried:
        head += f" (no adapter read the tool's output: {tried})"
    return "\n".join([head] + [f"  {n}" for n in tool["notes"]])
