"""``dtrace/mongo_time.d`` output -> DataFrames (what it printed at END).

The D twin of ``probes/mongo_latency.bt`` prints, after its ``# clock`` and banner
lines, each block after a title line (``samples/dtrace/mongo_time-*.txt``)::

    latency_ns_by_command:                        <- title: by "command"

      find                                        <- key (printa's key line)
               value  ------------- Distribution ------------- count
               65536 |                                         0
              131072 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@             57
    ...
    requests_by_command:
      find                                 84      <- printa "  %-32s  %@d"
    replies_by_command:
      find                                 84
    total_ns_by_conn:
      4127,9                               1234
    ...
    requests: 60  replies: 56  stream replies: 16  no-reply (moreToCome): 4
    answered though sent with moreToCome: 1
    lost: unmatched replies 0, requests without reply 0, malformed headers 0, dropped events 0

    answered_no_reply_by_command:
      endSessions                          1       <- printa "  %-32s  %@d"

The ``answered`` line and its block (replies the server sent anyway to requests that
expected none, OP_MSG moreToCome or a legacy write: FerretDB answers the Node.js driver's
endSessions; not unmatched replies) are absent from the output of scripts older than
them (``samples/dtrace/``, recorded before): no row then (the model reads 0).

The histograms are DTrace ``quantize()``: power-of-two buckets ``[V, 2V)`` in ns, so a
percentile read from them is only known to lie in a bucket. Sums and maxima are exact
(``sum()``, ``max()``). The quantize text and the printa lines are read by
``formats.quantize``; this module names what mongo_time.d's titles mean.

``parse_dtrace_latency`` columns (one row per printed bucket):

    by      str    "op", "command" or "conn"
    key     str    opcode name, command name, or "PID,FD" for a connection
    lo, hi  int64  bucket bounds in ns, [lo, hi)
    count   int64  requests timed in the bucket

``parse_dtrace_failures`` columns (one row per printed line of ``failed_by_command:`` and
``failed_by_op:``, printa ``"  KEY,CODE  N"``: replies that failed, probes/README.md):

    by      str    "command" or "op"
    key     str    command or opcode name
    code    int64  the reply's error code (-1: it had none)
    count   int64  replies

``parse_dtrace_latency_totals`` columns (one row per printed number):

    stat    str    "requests", "replies" (timed), "total_ns", "max_ns",
                   "answered_no_reply" (by "command" only); for the footer its counter
                   name: requests, replies, stream_replies, no_reply, answered_no_reply
                   (its "answered though sent with moreToCome: N" line),
                   unmatched_replies, requests_without_reply, malformed, dropped
    by      str    "op", "command", "conn" ("" for the footer)
    key     str    as above ("" for the footer)
    value   int64

USAGE::

    from mongoprobe.formats.dtrace_latency import parse_dtrace_latency, parse_dtrace_latency_totals
    hists = parse_dtrace_latency("samples/dtrace/mongo_time-ferretdb.txt")
    totals = parse_dtrace_latency_totals("samples/dtrace/mongo_time-ferretdb.txt")
    failed = parse_dtrace_failures("samples/dtrace/mongo_time-ferretdb.txt")
"""

from __future__ import annotations

import io
import os
import re
from typing import IO

import pandas as pd

from .errors import FormatError
from .quantize import parse_quantize, parse_scalars
from .source import read_input

HIST_COLUMNS = ["by", "key", "lo", "hi", "count"]
FAILED_COLUMNS = ["by", "key", "code", "count"]
TOTAL_COLUMNS = ["stat", "by", "key", "value"]
_TITLE = re.compile(
    r"^(latency_ns|requests|replies|total_ns|max_ns|answered_no_reply)_by_(op|command|conn)$")
_CLOCK = re.compile(r"^# clock timestamp_ns=(\d+) walltimestamp_ns=(\d+)")
FOOTER = ("requests", "replies", "stream_replies", "no_reply", "answered_no_reply",
          "unmatched_replies", "requests_without_reply", "malformed", "dropped")
# the footer's line between its two (mongo_wire.d.in's END; the words of the line
# wire.facts.answered_line prints, which may add "(COMMAND N, ...)")
_ANSWERED = re.compile(r"^\s*answered though sent with moreToCome: (\d+)(?: \(.*\))?\s*$",
                       re.M)


def is_dtrace_latency(text: str) -> bool:
    """Cheap check: mongo_time.d's histogram title and its footer's first words."""
    head = text[:65536]
    return "\nlatency_ns_by_command:" in head and (
        "\nrequests: " in text[-4096:] or "\nrequests: " in head)


def footer_answered(text: str) -> list[int]:
    """The counts of the footer's "answered though sent with moreToCome: N" lines, in
    order ([] for output of a script older than the line)."""
    return [int(m[1]) for m in _ANSWERED.finditer(text)]


def _conn_key(by: str, key: str) -> str:
    # printa prints the two keys of @by_conn[pid, fd] as "  4127        9"
    return ",".join(key.split()) if by == "conn" else key


def parse_dtrace_latency(text_or_path: str | os.PathLike[str] | IO[str],
                         source: str | None = None) -> pd.DataFrame:
    """The latency histograms (see the module docstring). ``FormatError`` on damaged
    quantize text or on output with no ``latency_ns_by_*`` block at all."""
    text, src = read_input(text_or_path, source)
    if "latency_ns_by_" not in text:
        raise FormatError(src, 1, "mongo_time.d output (a 'latency_ns_by_command:' title)")
    if "Distribution" not in text:      # nothing timed: the titles print, no histogram
        return pd.DataFrame(columns=HIST_COLUMNS).astype(
            {"lo": "int64", "hi": "int64", "count": "int64"})
    q = parse_quantize(io.StringIO(text), src)
    rows = []
    for r in q.itertuples(index=False):
        m = _TITLE.match(r.name)
        if m and m[1] == "latency_ns":
            rows.append((m[2], _conn_key(m[2], r.key), r.lo, r.hi, r.count))
    df = pd.DataFrame(rows, columns=HIST_COLUMNS)
    return df.astype({"by": str, "key": str, "lo": "int64", "hi": "int64", "count": "int64"})


def parse_dtrace_latency_totals(text_or_path: str | os.PathLike[str] | IO[str],
                                source: str | None = None) -> pd.DataFrame:
    """Request counts, exact sums and maxima, and the footer's counters. ``FormatError``
    when the footer is missing (the script did not reach END)."""
    text, src = read_input(text_or_path, source)
    s = parse_scalars(io.StringIO(text), src)
    rows = []
    for r in s.itertuples(index=False):
        if r.name in FOOTER and r.key == "":
            rows.append((r.name, "", "", r.value))
        elif m := _TITLE.match(r.name):
            if m[1] != "latency_ns":
                rows.append((m[1], m[2], _conn_key(m[2], r.key), r.value))
    if not any(r[0] == "answered_no_reply" and r[1] == "" for r in rows):
        # not a line of the footer parse_scalars reads: read here
        rows += [("answered_no_reply", "", "", n) for n in footer_answered(text)]
    if not any(r[0] == "replies" and r[1] == "" for r in rows):
        raise FormatError(src, max(len(text.splitlines()), 1),
                          "mongo_time.d's footer 'requests: N  replies: N ...' (printed at END)")
    df = pd.DataFrame(rows, columns=TOTAL_COLUMNS)
    return df.astype({"stat": str, "by": str, "key": str, "value": "int64"})


def parse_dtrace_failures(text_or_path: str | os.PathLike[str] | IO[str],
                          source: str | None = None) -> pd.DataFrame | None:
    """The failed replies per command and per opcode, with their codes (see the module
    docstring); None for output of a mongo_time.d that did not read replies yet (no
    ``failed_by_command:`` title): its failures are unknown, not zero."""
    text, src = read_input(text_or_path, source)
    if "\nfailed_by_command:" not in text:
        return None
    rows = []
    for r in parse_scalars(io.StringIO(text), src).itertuples(index=False):
        if r.name in ("failed_by_command", "failed_by_op"):
            key, _, code = r.key.rpartition(",")
            rows.append((r.name.removeprefix("failed_by_"), key, int(code), r.value))
    return pd.DataFrame(rows, columns=FAILED_COLUMNS).astype(
        {"by": str, "key": str, "code": "int64", "count": "int64"})


def clock(text: str) -> tuple[int, int] | None:
    """(DTrace timestamp, wall clock ns) at the script's start, from its ``# clock`` line
    (mongo_time.d and mongo_snoop.d print it in BEGIN); None without one."""
    for line in text[:65536].splitlines():
        if m := _CLOCK.match(line.strip()):
            return int(m[1]), int(m[2])
    return None
