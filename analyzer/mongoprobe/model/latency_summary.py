"""Server-side request latency: one summary, whichever probe measured it.

A :class:`LatencySummary` holds histograms (histogram.py frames: the probes'
log-linear buckets, or DTrace's log2 ones) keyed by command, opcode and connection,
the request counts, the exact sums/maxima the probes count, and the loss counters. It
is a view of

* ``mongoprobe.model.latencies.Latencies`` (:func:`from_latencies`): what the bpftrace and
  bcc probes measured, a recorded run, a capture's pairs -- one representation;
* per-request events alone (:func:`from_events`): exact percentiles;
* ``dtrace/mongo_time.d`` output (:func:`from_dtrace_quantize`): DTrace quantize
  histograms, whose percentiles are given as bucket bounds.

and renders as DTrace-style quantize text (:meth:`LatencySummary.render`) or the JSON
of the command-line contract (:meth:`LatencySummary.to_json`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mongoprobe.wire import error_codes as errorcodes, facts as wirefacts
from mongoprobe.model import log2_histogram as histogram, loglinear_buckets as loglinear
from mongoprobe.formats.wire_slices import COUNT_KEYS, LOST_KEYS

UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000}


@dataclass
class Group:
    """Latency of one command, opcode or connection."""

    hist: pd.DataFrame
    total_ns: int | None = None        # exact sum, when the probe counted it
    max_ns: int | None = None          # exact max, when the probe counted it
    values: np.ndarray | None = None   # every latency, when events were recorded
    # DTrace quantize: log2 buckets (percentiles are their middles, at most 50% off)
    bucket_bounds: bool = False
    # replies with ok: 0, and per error code (None: the source does not check replies)
    errors: int | None = None
    codes: dict[int, int] | None = None

    @property
    def count(self) -> int:
        return histogram.total(self.hist)

    def merge(self, other: "Group") -> "Group":
        def add(a, b):
            return None if a is None or b is None else a + b
        vals = None if self.values is None or other.values is None else \
            np.concatenate([self.values, other.values])
        mx = None if self.max_ns is None or other.max_ns is None else max(self.max_ns, other.max_ns)
        codes = None
        if self.codes is not None and other.codes is not None:
            codes = dict(self.codes)
            for c, n in other.codes.items():
                codes[c] = codes.get(c, 0) + n
        return Group(histogram.merge(self.hist, other.hist), add(self.total_ns, other.total_ns),
                     mx, vals, self.bucket_bounds or other.bucket_bounds,
                     add(self.errors, other.errors), codes)

    def error_json(self) -> dict:
        """{"errors": N, "error_codes": {"59": n, ...}} when the source checks replies."""
        if self.errors is None:
            return {}
        return {"errors": int(self.errors),
                "error_codes": {str(c): int(n) for c, n in sorted((self.codes or {}).items())}}

    def stats(self) -> dict:
        """``wirefacts.stats`` of this group: exact from its values when it has them,
        else from its buckets, capped by its exact max."""
        if self.values is not None and len(self.values):
            return wirefacts.stats([], int(self.values.sum()), None, np.sort(self.values))
        lo, hi, count = (self.hist[c].to_numpy() for c in ("lo", "hi", "count"))
        nz = count > 0
        return wirefacts.stats(list(zip(lo[nz].tolist(), hi[nz].tolist(), count[nz].tolist())),
                               self.total_ns, self.max_ns)

    def to_json(self) -> dict:
        d = self.stats()
        exact = self.values is not None and len(self.values) > 0
        if d["count"] and not exact and self.bucket_bounds:
            d["percentiles"] = "log2 bucket middle"
        return {**d, "hist": histogram.to_json_buckets(self.hist), "exact": exact,
                **self.error_json()}


# The fd of a memory-BIO TLS connection whose socket is not known (accepted before
# tracing began): 2^30 + its number, in every engine (probes/README.md, "TLS plaintext").
UNTIED_BIO = 1 << 30


@dataclass
class LatencySummary:
    by_command: dict[str, Group] = field(default_factory=dict)
    by_op: dict[str, Group] = field(default_factory=dict)
    by_conn: dict[str, Group] = field(default_factory=dict)
    requests_by_command: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    lost: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOST_KEYS, 0))
    engine: str = ""
    pid: int | None = None
    untraced: dict[str, int] = field(default_factory=dict)
    tls: dict | None = None     # what the TLS hooks decoded (Latencies.tls)
    # {command: replies the server sent to requests that asked for none} (cumulative)
    answered_no_reply: dict[str, int] = field(default_factory=dict)

    def merge(self, other: "LatencySummary") -> "LatencySummary":
        """Combine two intervals: histograms add; counters are cumulative, so take other's."""
        def mg(a: dict, b: dict) -> dict:
            out = dict(a)
            for k, g in b.items():
                out[k] = out[k].merge(g) if k in out else g
            return out
        return LatencySummary(mg(self.by_command, other.by_command), mg(self.by_op, other.by_op),
                              mg(self.by_conn, other.by_conn), dict(other.requests_by_command),
                              dict(other.counts), dict(other.lost), other.engine or self.engine,
                              other.pid or self.pid,
                              answered_no_reply=dict(other.answered_no_reply))

    def to_json(self) -> dict:
        codes = {c for g in self.by_command.values() for c in (g.codes or {})}
        names = {str(c): errorcodes.name(c) for c in sorted(codes) if errorcodes.name(c)}
        return {
            # the codes of failed replies, named (only when there are some)
            **({"error_names": names} if names else {}),
            "by_command": {k: g.to_json() for k, g in sorted(self.by_command.items())},
            "by_op": {k: g.to_json() for k, g in sorted(self.by_op.items())},
            "by_conn": {k: g.to_json() for k, g in sorted(self.by_conn.items())},
            "requests_by_command": dict(sorted(self.requests_by_command.items())),
            "counts": {k: int(v) for k, v in self.counts.items()},
            "lost": {k: int(v) for k, v in self.lost.items()},
            # replies to requests that asked for none, per command (counts' total)
            "answered_no_reply_by_command": dict(sorted(self.answered_no_reply.items())),
            # syscalls that carry messages the probe cannot decode (when it says)
            **({"untraced": {k: int(v) for k, v in self.untraced.items()}}
               if self.untraced else {}),
            **({"tls": self.tls} if self.tls else {}),
            "engine": self.engine,
            "pid": self.pid,
        }

    def label(self, by: str, key: str) -> str:
        """How :meth:`render` names a group: ``command = find``, ``conn = 4127,12``; a
        memory-BIO TLS connection whose socket is not known says so (its key stays)."""
        fd = key.rpartition(",")[2] if by == "conn" else ""
        if fd.isdigit() and int(fd) >= UNTIED_BIO:
            return (f"{by} = {key} (ssl #{int(fd) - UNTIED_BIO}: TLS on memory BIOs, "
                    "its socket not known)")
        return f"{by} = {key}"

    def loss_lines(self) -> str:
        """The counts and loss lines :meth:`render` ends with."""
        return wirefacts.loss_lines(self.counts, self.lost, self.tls, self.untraced,
                                    self.answered_no_reply)

    def render(self, by: str = "command", unit: str = "ns", labels: dict | None = None) -> str:
        """Quantize histograms for one grouping, then the counts and loss lines.

        ``labels`` maps a group key to extra text (e.g. a connection's peer address).
        A source whose groups or losses mean something else names them in its own
        words by overriding :meth:`label` and :meth:`loss_lines` (a capture's
        ``pcap.CaptureSummary``); the rendering is this one.
        """
        groups = {"command": self.by_command, "op": self.by_op, "conn": self.by_conn}[by]
        scale = UNITS[unit]
        out = []
        for key, g in sorted(groups.items(), key=lambda kv: -kv[1].count):
            # the quantize picture is log2 (the log-linear buckets nest in it)
            h = _rescale(g.hist, scale)
            d = g.to_json()
            avg = f"{d['avg_ns'] / scale:,.0f}" if d["avg_ns"] is not None else "?"
            mx = f"{d['max_ns'] / scale:,.0f}" if d["max_ns"] is not None else "?"
            label = f" ({labels[key]})" if labels and key in labels else ""
            out.append(f"{self.label(by, key)}{label}   count {d['count']}   "
                       f"avg {avg} {unit}   max {mx} {unit}")
            if g.errors:
                out.append(f"  failed (ok: 0): {g.errors}   {errorcodes.summary(g.codes or {})}")
            out.append(histogram.render_quantize(h, title="", unit=unit).rstrip("\n"))
            out.append("")
        out.append(self.loss_lines())
        if by == "command" and "[compressed]" in groups:
            out.append("([compressed]: OP_COMPRESSED requests as the in-kernel histograms "
                       "key them; --events with --engine bcc names their commands)")
        if any(g.bucket_bounds for g in groups.values()):
            out.append("(DTrace quantize: log2 buckets; a percentile is known only to its "
                       "bucket: --json gives the bucket's middle, at most 50% off)")
        return "\n".join(out) + "\n"


# the loss lines every latency tool prints (one copy: wirefacts)
footer = wirefacts.footer
tls_line = wirefacts.tls_line
untraced_line = wirefacts.untraced_line


def _rescale(h: pd.DataFrame, scale: int) -> pd.DataFrame:
    # Re-bucket by each bucket's lower bound: log2 buckets in ns map onto log2
    # buckets in the new unit up to the factor the unit change introduces.
    vals = {}
    for lo, c in zip(h["lo"].tolist(), h["count"].tolist()):
        b = histogram.bucket_of(lo // scale)
        vals[b] = vals.get(b, 0) + c
    return histogram.from_buckets((lo, hi, c) for (lo, hi), c in vals.items())


def _loglinear_hist(buckets: pd.Series, counts: pd.Series) -> pd.DataFrame:
    """A histogram frame of log-linear buckets (``mongoprobe.model.loglinear_buckets``)."""
    u, at = np.unique(np.asarray(buckets, dtype=np.int64), return_inverse=True)
    n = np.zeros(len(u), dtype=np.int64)
    np.add.at(n, at, np.asarray(counts, dtype=np.int64))
    return histogram.from_sorted(_bucket_rows(u, n))


def _bucket_rows(buckets: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``(lo, hi, count)`` int64 rows of log-linear buckets, in their order."""
    lo_hi = {b: loglinear.bounds(b) for b in set(buckets.tolist())}
    return np.array([(*lo_hi[b], n) for b, n in zip(buckets.tolist(), counts.tolist())],
                    dtype=np.int64).reshape(-1, 3)


def _hist_rows_by_key(h: pd.DataFrame, col: str) -> dict:
    """``{key: histogram}`` of a hist table's rows (its intervals summed), each key's
    log-linear buckets made in one pass: as ``_loglinear_hist`` per key, without a
    pandas call per key."""
    if h.empty:
        return {}
    per = h.groupby([col, "bucket"], sort=True)["count"].sum()
    keys = per.index.get_level_values(0).tolist()
    rows = _bucket_rows(per.index.get_level_values(1).to_numpy(dtype="int64"),
                        per.to_numpy(dtype="int64"))
    codes = per.index.codes[0]
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    # sorted by bucket, so by lo: each slice is a histogram as from_buckets makes it
    return {keys[a]: histogram.from_sorted(rows[a:b].copy()) for a, b in zip(starts, ends)}


def _from_values(values: np.ndarray, errors: int | None, codes: dict | None) -> Group:
    """A group made of its events alone (its histogram from their latencies)."""
    b = loglinear.index(values)
    return Group(_loglinear_hist(b, np.ones(len(b), "int64")), int(values.sum()),
                 int(values.max()), values, errors=errors, codes=codes)


def from_latencies(lat, engine: str = "", pid: int | None = None,
                   start: float | None = None, end: float | None = None,
                   summary: LatencySummary | None = None, conn_label=None) -> LatencySummary:
    """The summary of ``mongoprobe.model.latencies.Latencies`` over [start, end) (all of it
    when both are None): per command, opcode and connection, exact from the events
    when every request has one, else from the histograms (percentiles within 1.6%).
    ``summary``: the (empty) summary to fill, for a source that names things in its
    own words (a capture's ``CaptureSummary``); ``conn_label(fd)``: a connection's key
    (``"pid,fd"`` by default)."""
    whole = start is None and end is None
    tot, hist = lat.totals, lat.hist
    ctot, chist = lat.conn_totals, lat.conn_hist
    if not whole:
        tot, hist = lat._inside(tot, start, end), lat._inside(hist, start, end)
        ctot, chist = lat._inside(ctot, start, end), lat._inside(chist, start, end)
    ev = None
    if lat.exact:
        ev = lat.events if whole else lat.events[(lat.events["time"] >= start)
                                                 & (lat.events["time"] < end)]

    err = lat.errors if whole else lat._inside(lat.errors, start, end)

    def groups(t: pd.DataFrame, h: pd.DataFrame, col: str, label=str) -> dict:
        out = {}
        # one pass over each table, then numpy per key: thousands of connections made
        # a pandas call per key cost seconds (10,000: 8 s of a CLI's CPU)
        named = {"count": ("count", "sum"), "sum_ns": ("sum_ns", "sum"),
                 "max_ns": ("max_ns", "max")}
        if "errors" in t.columns:       # (not per connection)
            named["errors"] = ("errors", "sum")
        per_key = t.groupby(col, sort=True).agg(**named)
        counts = per_key["count"].to_numpy(dtype="int64")
        sums = per_key["sum_ns"].to_numpy(dtype="int64")
        maxes = per_key["max_ns"].to_numpy(dtype="int64")
        errs = per_key["errors"].to_numpy(dtype="int64") if "errors" in per_key else None
        hist_of = _hist_rows_by_key(h, col)
        codes_of: dict = {}
        if errs is not None and len(err):
            for (key, code), n in err.groupby([col, "code"], sort=True)["count"].sum().items():
                codes_of.setdefault(key, {})[int(code)] = int(n)
        v_of = (ev.groupby(col, sort=False).indices
                if ev is not None and col in ev.columns else None)
        lat_ns = ev["latency_ns"].to_numpy(dtype="int64") if v_of is not None else None
        codes_ev = (ev["error_code"].to_numpy(dtype="int64")
                    if v_of is not None and "error_code" in ev.columns else None)
        for n, key in enumerate(per_key.index.tolist()):
            if not counts[n]:
                continue
            values = None
            errors = codes = None
            if errs is not None:
                errors, codes = int(errs[n]), codes_of.get(key, {})
            if v_of is not None:
                idx = v_of.get(key, [])
                values = lat_ns[idx]
                if errors is not None and codes_ev is not None:
                    failed = codes_ev[idx]
                    failed = failed[failed != 0]
                    errors = int(len(failed))
                    c, k = np.unique(failed, return_counts=True)
                    codes = {int(a): int(b) for a, b in zip(c, k)}
            if values is not None and len(values) != int(counts[n]):
                # events named what the kernel keyed "[compressed]" (compressed names
                # from events): this group is its events; the rest are under their names
                if not len(values):
                    continue
                out[label(key)] = _from_values(values, errors, codes)
                continue
            hist = hist_of[key] if key in hist_of else histogram.empty()
            out[label(key)] = Group(hist, int(sums[n]), int(maxes[n]), values,
                                    errors=errors, codes=codes)
        if v_of is not None and col == "command":
            for key, idx in v_of.items():
                if label(key) not in out and key not in set(t[col]):
                    failed = codes_ev[idx] if codes_ev is not None else np.zeros(0, "int64")
                    failed = failed[failed != 0]
                    c, k = np.unique(failed, return_counts=True)
                    out[label(key)] = _from_values(lat_ns[idx], int(len(failed)),
                                                   {int(a): int(b) for a, b in zip(c, k)})
        return out

    s = summary if summary is not None else LatencySummary()
    s.engine, s.pid = engine, pid
    s.by_command = groups(tot, hist, "command")
    s.by_op = groups(tot, hist, "opcode")
    s.by_conn = groups(ctot, chist, "fd", conn_label or (lambda fd: f"{pid},{fd}"))
    req = tot.groupby("command")[["count", "noreply"]].sum().sum(axis=1)
    s.requests_by_command = {str(k): int(v) for k, v in req.items() if v}
    if whole:
        s.counts, s.lost = dict(lat.counts), dict(lat.lost)
        s.answered_no_reply = dict(lat.answered_no_reply)
        s.untraced = dict(getattr(lat, "untraced", {}) or {})
        s.tls = getattr(lat, "tls", None)
    else:
        # a window's requests are those its seconds answered (or due no reply); the
        # probe prints its counters with each second it hands over, so the losses of
        # a window are their growth between its seconds (stream replies too)
        answered, noreply = int(tot["count"].sum()), int(tot["noreply"].sum())
        grown = lat.losses(start, end, keys=("stream_replies", "answered_no_reply",
                                             *LOST_KEYS))
        s.counts = {"requests": answered + noreply, "replies": answered,
                    "stream_replies": grown.get("stream_replies", 0), "no_reply": noreply,
                    "answered_no_reply": grown.get("answered_no_reply", 0)}
        s.lost = {k: grown.get(k, 0) for k in LOST_KEYS}
    return s


def from_events(events: pd.DataFrame, engine: str = "", pid: int | None = None,
                checked: bool = True) -> LatencySummary:
    """Exact latency from per-request events (requests counted here had a reply): the
    one path, through ``latencies.Latencies``. ``checked``: the events' source reads
    replies (their ``error_code``); else failures are unknown."""
    from mongoprobe.model.latencies import Latencies

    if "time" not in events.columns or events["time"].isna().any():
        # no wall clock (a D script without its clock line): the whole run needs none
        events = events.assign(time=events.get("elapsed_s", 0.0))
    s = from_latencies(Latencies.from_events(events), engine=engine, pid=pid)
    return s if checked else unchecked(s)


def unchecked(s: LatencySummary) -> LatencySummary:
    """``s`` from a source that does not look at replies (a capture, mongo_snoop.bt):
    failed replies unknown, not zero."""
    for g in (*s.by_command.values(), *s.by_op.values(), *s.by_conn.values()):
        g.errors = g.codes = None
    return s


def from_dtrace_quantize(hists: pd.DataFrame, totals: pd.DataFrame, dropped: int = 0,
                         pid: int | None = None,
                         failed: pd.DataFrame | None = None) -> LatencySummary:
    """The adapter from ``dtrace/mongo_time.d`` output (``formats.dtrace_latency``'s
    frames) to the summary every engine feeds: quantize buckets as histograms, its exact
    ``sum()``/``max()`` as totals and maxima, the footer's counters; ``dropped`` is what
    DTrace reported lost on stderr (``formats.dtrace_drops``); ``failed``, its failed
    replies (``parse_dtrace_failures``; None: not read, the failures unknown). Percentiles
    of these groups are the one estimator's (``wirefacts.stats``) on log2 buckets
    (``Group.bucket_bounds`` says so in the JSON)."""
    def stat(name: str, by: str) -> dict:
        t = totals[(totals["stat"] == name) & (totals["by"] == by)]
        return dict(zip(t["key"], t["value"].astype(int)))

    def groups(by: str) -> dict:
        tot, mx = stat("total_ns", by), stat("max_ns", by)
        codes: dict[str, dict[int, int]] = {}
        if failed is not None:
            for r in failed[failed["by"] == by].itertuples(index=False):
                codes.setdefault(r.key, {})[int(r.code)] = int(r.count)
        out = {}
        # one pass over plain lists: per-group pandas calls took a minute at 10,000
        # connections
        rows: dict = {}
        sub = hists[hists["by"] == by]
        for key, lo, hi, n in zip(sub["key"].tolist(), sub["lo"].tolist(), sub["hi"].tolist(),
                                  sub["count"].tolist()):
            rows.setdefault(key, []).append((lo, hi, n))
        for key in sorted(rows):
            h = histogram.from_buckets(rows[key])
            out[str(key)] = Group(h, tot.get(key), mx.get(key), bucket_bounds=True)
            if failed is not None and by != "conn":     # (not counted per connection)
                c = codes.get(str(key), {})
                out[str(key)].errors, out[str(key)].codes = sum(c.values()), c
        return out

    s = LatencySummary(engine="dtrace", pid=pid)
    s.by_command, s.by_op, s.by_conn = groups("command"), groups("op"), groups("conn")
    s.requests_by_command = stat("requests", "command")
    s.answered_no_reply = stat("answered_no_reply", "command")
    foot = dict(zip(totals.loc[totals["by"] == "", "stat"],
                    totals.loc[totals["by"] == "", "value"].astype(int)))
    s.counts = {k: int(foot.get(k, 0)) for k in COUNT_KEYS}
    s.lost = {k: int(foot.get(k, 0)) for k in LOST_KEYS}
    s.lost["dropped"] = int(dropped)     # the script prints 0: DTrace counts its own
    return s
