"""Run a ``dtrace/*.d`` script on a pid and read what it printed (``--engine dtrace``).

One path for every subcommand: ``run`` starts ``dtrace -s dtrace/SCRIPT -p PID``
(probes.dtrace), stops it after ``-d``, when the pid exits or at Ctrl-C (SIGTERM:
END still runs and prints), and returns its stdout lines and what DTrace reported
lost on stderr. The readers turn those lines into the summaries the other engines
give: ``latency_summary`` (mongo_time.d), ``snoop_events`` (mongo_snoop.d).

TLS (``--tls auto|on|off``): ``tls_script`` swaps a wire script for its ``_tls``
twin (OpenSSL's SSL_read/SSL_write through the pid provider) when
``probes/tlshooks.py`` finds OpenSSL in the target; ``tls_report`` reads the
scripts' ``tls:`` block into the ``untraced``/``tls`` keys the other engines give.
A connection on memory BIOs is shown by the scripts as 2^30 + its number until
its ``# tls tie PID SHOWN FD`` line names its socket: ``tls_ties`` reads those
lines, ``latency_summary`` and ``snoop_rows`` show the socket's fd instead.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from mongoprobe.model import latency_summary as latency
from mongoprobe.run import tracer as probes


# the wire scripts' buffer sizes (-x; they carry no pragma for them, which would
# override the command line): per-connection state and, for snoop, its lines
WIRE_OPTIONS = {"mongo_time.d": ("dynvarsize=16m",),
                "mongo_snoop.d": ("dynvarsize=16m", "bufsize=8m")}

# What one connection may take: its dynamic variables (about 20 scalars and a name,
# plus 4 request slots of 5 with a name each, and, once it sent a request that
# expected no reply, its requestID and a second name; 16m held 3,000 connections with
# every slot used, measured before that pair) and, in mongo_time.d, its aggregations
# (a quantize, a sum and a max, each entry as large as the largest, a quantize kept
# twice: about 2 KB; 3,000 connections overflowed the default aggsize, 10,000 lost
# 18,434 of 30,000 updates at 2 KB each).
DYNVAR_PER_CONN = 4096
AGG_PER_CONN = 8192


def wire_options(script: str, max_connections: int = probes.MAX_CONNECTIONS,
                 by_conn: bool = True) -> tuple[str, ...]:
    """The -x options of a wire script sized for ``max_connections`` (never below
    WIRE_OPTIONS' sizes; a ``_tls`` script's are its plain twin's). ``by_conn``
    False: mongo_time.d keeps no aggregation per connection (its NO_CONN), so its
    aggregation space does not grow with them."""
    script = script.replace("_tls.d", ".d")
    mb = 1 << 20
    dyn = max(16 * mb, max_connections * DYNVAR_PER_CONN)
    opts = [f"dynvarsize={-(-dyn // mb)}m"]
    if script == "mongo_time.d":
        per_conn = max_connections * AGG_PER_CONN if by_conn else 0
        opts.append(f"aggsize={-(-max(4 * mb, per_conn) // mb)}m")
    return tuple(opts) + tuple(o for o in WIRE_OPTIONS[script]
                               if not o.startswith("dynvarsize="))


def wire_args(script: str, args: tuple[str, ...], by_conn: bool) -> tuple[str, ...]:
    """The macro arguments of a wire script: ``args`` (the _tls twin's MODULE FREE),
    then mongo_time(_tls).d's NO_CONN, 1 unless ``by_conn`` (as wire_options sizes it)."""
    if script.replace("_tls.d", ".d") == "mongo_time.d":
        return (*args, "0" if by_conn else "1")
    return args


@dataclass
class TlsChoice:
    """What ``tls_script`` chose: the script to run, its macro arguments, the OpenSSL
    hooked (a description, or None) and lines to say on stderr."""
    script: str
    args: tuple[str, ...] = ()
    hooked: str | None = None
    notes: list[str] = field(default_factory=list)


def tls_script(script: str, pid: int, mode: str = "auto") -> TlsChoice:
    """The wire script to run for ``--tls MODE``: ``script``'s ``_tls`` twin, with the
    OpenSSL module as $1 ("libssl.so.3", or "a.out" when OpenSSL is in the executable)
    and $2 1 when it has SSL_free (then connections on memory BIOs are decoded: their
    state is freed there), when ``mode`` is auto or on and the target has OpenSSL;
    else ``script`` itself.
    ``mode`` on without OpenSSL: ProbeError (Go's crypto/tls cannot be hooked from D:
    its probe descriptions cannot name the functions)."""
    if mode == "off":
        return TlsChoice(script)
    name = script.removesuffix(".d")
    th = probes.probe_module("tlshooks")
    try:
        hooks = th.find(pid)
    except (OSError, th.TlsError) as e:     # TlsError: found, not hookable
        if mode == "on":
            raise probes.ProbeError(f"--tls on: {e}") from None
        return TlsChoice(script, notes=[f"{name}: TLS plaintext not decoded: {e}"])
    notes = [f"{name}: TLS Go crypto/tls in {h.shown} is not decoded by DTrace (D cannot "
             "name crypto/tls.(*Conn).Read/Write): its connections are only counted; "
             "--engine bcc decodes them" for h in hooks if h.kind == "go"]
    ssl = [h for h in hooks if h.kind == "openssl"]
    if not ssl:
        if mode == "on":
            what = " (only Go crypto/tls, which D cannot name)" if notes else ""
            raise probes.ProbeError(f"--tls on: PID {pid} has no OpenSSL for DTrace to hook"
                                    f"{what}; --engine bcc decodes OpenSSL and Go crypto/tls")
        return TlsChoice(script, notes=notes)
    h = ssl[0]
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        exe = None
    module = "a.out" if h.shown == exe else os.path.basename(h.shown)
    hooked = (f"OpenSSL {'/'.join(h.funcs)} in {h.shown} (pid provider: entry and "
              f"return{'; SSL_free' if h.free else ''})")
    tls = f"{name}_tls.d"
    return TlsChoice(tls, (module, "1" if h.free else "0"), hooked,
                     notes + [f"{name}_tls: TLS plaintext from {hooked}"])


def tls_report(text: str, hooked: str | None) -> tuple[dict, dict | None]:
    """The wire scripts' ``tls:`` block -> (untraced, tls) as the other engines give them:
    ``untraced`` {"tls_connections" (TLS connections not decoded; never below 0: a
    memory-BIO connection whose ClientHello came before tracing is decoded without
    having been seen as TLS), "tls_hooked", "tls_calls_without_socket"}; ``tls``
    {"hooked": [...], "connections" (decoded), "calls", "memory_bio" (of the
    connections, those keyed by their SSL *), "memory_bio_tied" (of those, tied to
    their socket)} when OpenSSL was hooked, else None. ({}, None) for output without
    the block (scripts older than it)."""
    import io

    from mongoprobe.formats.quantize import parse_scalars

    s = parse_scalars(io.StringIO(text), "dtrace")
    t = {r.key: int(r.value) for r in s.itertuples(index=False) if r.name == "tls"}
    if not t:
        return {}, None
    decoded = t.get("decoded", 0)
    untraced = {"tls_connections": max(0, t.get("connections", 0) - decoded),
                "tls_hooked": 1 if hooked else 0,
                "tls_calls_without_socket": t.get("calls_without_socket", 0)}
    tls = ({"hooked": [hooked], "connections": decoded, "calls": t.get("calls", 0),
            "memory_bio": t.get("memory_bio", 0), "memory_bio_tied": t.get("memory_bio_tied", 0)}
           if hooked else None)
    return untraced, tls


def tls_ties(lines) -> dict[tuple[int, int], int]:
    """The ``# tls tie PID SHOWN FD`` lines of a _tls script: {(pid, shown): fd}, the
    socket of each memory-BIO connection tied to one."""
    ties = {}
    for line in lines:
        if line.startswith("# tls tie "):
            f = line.split()
            if len(f) == 6 and all(x.lstrip("-").isdigit() for x in f[3:]):
                ties[int(f[3]), int(f[4])] = int(f[5])
    return ties


def _tie_conn_keys(hists: pd.DataFrame, totals: pd.DataFrame, ties: dict):
    """mongo_time_tls.d's per-connection rows of tied memory-BIO connections under their
    socket's fd ("PID,FD"), merged with the fd's other rows (its earlier connections):
    buckets and sums added, maxima the larger."""
    def key(k: str) -> str:
        pid, _, fd = k.partition(",")
        fd2 = ties.get((int(pid), int(fd))) if pid.isdigit() and fd.isdigit() else None
        return k if fd2 is None else f"{pid},{fd2}"

    conn = hists["by"] == "conn"
    if conn.any():
        h = hists[conn].assign(key=hists.loc[conn, "key"].map(key))
        h = h.groupby(["by", "key", "lo", "hi"], as_index=False, sort=False)["count"].sum()
        hists = pd.concat([hists[~conn], h[hists.columns]], ignore_index=True)
    conn = totals["by"] == "conn"
    if conn.any():
        t = totals[conn].assign(key=totals.loc[conn, "key"].map(key))
        t = pd.concat([g.groupby(["stat", "by", "key"], as_index=False, sort=False)["value"]
                       .agg("max" if stat == "max_ns" else "sum")
                       for stat, g in t.groupby("stat", sort=False)], ignore_index=True)
        totals = pd.concat([totals[~conn], t[totals.columns]], ignore_index=True)
    return hists, totals


@dataclass
class DtraceRun:
    lines: list[str]                 # stdout, as printed
    stderr: list[str]                # dtrace's own messages
    returncode: int | None
    drops: pd.DataFrame = field(default_factory=pd.DataFrame)

    @property
    def dropped(self) -> int:
        from mongoprobe.formats.dtrace_drops import lost_events
        return lost_events(self.drops)

    def loss_line(self) -> str:
        from mongoprobe.formats.dtrace_drops import summary
        return summary(self.drops)


def run(script: str, pid: int, args: tuple = (), duration: float | None = None,
        options: tuple[str, ...] = (), on_line: Callable[[str], None] | None = None,
        banner: str | None = None) -> DtraceRun:
    """Trace ``pid`` with ``dtrace/SCRIPT`` until ``duration``, its exit or Ctrl-C.
    ``on_line`` sees each stdout line as it comes. ProbeError when it cannot start."""
    from mongoprobe.formats.dtrace_drops import parse_dtrace_drops

    probe = probes.dtrace(script, pid, *args, options=options)
    lines: list[str] = []
    asked_at: list[int] = []     # the lines printed when SIGTERM was last sent

    def ask() -> None:
        # dtrace takes a second SIGTERM as "quit now": its END output would be lost.
        # At 10,000 connections its consumer works 25-50 s of CPU on the aggregations
        # before printing a line (silent for 70-150 s on a busy 2-CPU machine), then
        # prints for seconds. Asked again only after 5 minutes in which it printed
        # nothing.
        printing = bool(asked_at) and len(lines) != asked_at[-1]
        asked_at.append(len(lines))
        if not printing:
            probe.interrupt()

    stopper = probes.Stopper(ask, lambda: probe.proc.poll() is None, duration, pid,
                             again=300.0, child=probe.proc.pid)
    if banner:
        print(banner, file=sys.stderr, flush=True)
    for line in probe.lines():
        lines.append(line)
        if on_line:
            on_line(line)
    rc = probe.stop()
    return DtraceRun(lines, probe.stderr_lines, rc, parse_dtrace_drops(probe.stderr_lines))


def failed(run: DtraceRun) -> str | None:
    """The error line when dtrace failed before printing its results, else None."""
    if run.returncode in (0, None):
        return None
    errors = [ln for ln in run.stderr if ln.startswith("dtrace:") and "drop" not in ln]
    return (errors or run.stderr or [f"exit status {run.returncode}"])[-1]


def latency_summary(run: DtraceRun, pid: int | None = None, hooked: str | None = None):
    """mongo_time.d's END output -> latency.LatencySummary (engine "dtrace"); ``hooked``:
    the OpenSSL mongo_time_tls.d hooked (TlsChoice.hooked)."""
    from mongoprobe.model import latency_summary as latency
    from mongoprobe.formats.dtrace_latency import (parse_dtrace_failures, parse_dtrace_latency,
                                                   parse_dtrace_latency_totals)

    text = "".join(run.lines)
    hists, totals = (parse_dtrace_latency(text, "mongo_time.d"),
                     parse_dtrace_latency_totals(text, "mongo_time.d"))
    ties = tls_ties(run.lines)
    if ties:
        hists, totals = _tie_conn_keys(hists, totals, ties)
    s = latency.from_dtrace_quantize(hists, totals, run.dropped, pid,
                                     parse_dtrace_failures(text, "mongo_time.d"))
    s.untraced, s.tls = tls_report(text, hooked)
    return s


def snoop_events(lines: list[str]) -> pd.DataFrame:
    """mongo_snoop.d's request lines -> the events table (formats.wire_events), ``time``
    from its ``# clock`` line (DTrace's walltimestamp at the start)."""
    from mongoprobe.formats import wire_events
    from mongoprobe.formats.dtrace_latency import clock

    df = wire_events.parse_snoop(lines, "mongo_snoop.d")
    ties = tls_ties(lines)
    if ties and len(df):
        df["fd"] = [ties.get((p, f), f) for p, f in zip(df["pid"], df["fd"])]
    c = clock("".join(lines[:5]))
    if c is not None and len(df):
        df["time"] = c[1] / 1e9 + df["elapsed_s"]
    return df


class SnoopTies:
    """mongo_snoop_tls.d's lines as they come, with the socket's fd for memory-BIO
    connections: a request line of a connection not tied yet (its first reply comes
    before the send that ties it) is held until its ``# tls tie`` line, or the end
    (then shown as it is: 2^30 + its number, its socket never seen)."""

    FD = re.compile(r"^(\S+\s+\S+\s+\S+\s+)(\d+)\s+")

    def __init__(self):
        self.ties: dict[tuple[int, int], int] = {}
        self.held: list[tuple[str, dict]] = []

    def feed(self, line: str, row: dict | None) -> list[tuple[str, dict | None]]:
        """(line, its parsed row or None) -> the (line, row) pairs to show now."""
        if line.startswith("# tls tie "):
            self.ties.update(tls_ties([line]))
            ready = [(ln, r) for ln, r in self.held if (r["pid"], r["fd"]) in self.ties]
            self.held = [(ln, r) for ln, r in self.held if (r["pid"], r["fd"]) not in self.ties]
            return [self._tied(ln, r) for ln, r in ready]
        # a memory-BIO connection is 2^30 + its number until tied (mongo_wire.d.in)
        if row is None or row["fd"] < latency.UNTIED_BIO:
            return [(line, row)]
        if (row["pid"], row["fd"]) in self.ties:
            return [self._tied(line, row)]
        self.held.append((line, row))
        return []

    def flush(self) -> list[tuple[str, dict]]:
        out, self.held = self.held, []
        return out

    def _tied(self, line: str, row: dict) -> tuple[str, dict]:
        fd = self.ties[row["pid"], row["fd"]]
        return self.FD.sub(lambda m: f"{m[1]}{fd:<4} ", line, count=1), {**row, "fd": fd}


def snoop_footer(lines: list[str]):
    """The counters of mongo_snoop.d's footer -> (counts, lost) dicts (answered_no_reply:
    its "answered though sent with moreToCome: N" line, 0 without one)."""
    import io

    from mongoprobe.model import latency_summary as latency
    from mongoprobe.formats.dtrace_latency import footer_answered
    from mongoprobe.formats.quantize import parse_scalars

    text = "".join(lines)
    s = parse_scalars(io.StringIO(text), "mongo_snoop.d")
    foot = {r.name: int(r.value) for r in s.itertuples(index=False) if r.key == ""}
    if "answered_no_reply" not in foot and (answered := footer_answered(text)):
        foot["answered_no_reply"] = answered[-1]
    return ({k: foot.get(k, 0) for k in latency.COUNT_KEYS},
            {k: foot.get(k, 0) for k in latency.LOST_KEYS})
