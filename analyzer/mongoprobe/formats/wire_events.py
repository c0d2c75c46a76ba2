"""Per-request events of the wire-protocol probes -> DataFrame.

Two real forms, one table:

* ``mongo_snoop.bt`` text lines (bpftrace), after its ``# clock`` and header lines, and
  ``dtrace/mongo_snoop.d``'s, which print the same layout (and its footer at the end)::

    TIME(s)        PID     TID     FD   REQID  OPCODE   COMMAND  BYTES_IN BYTES_OUT LAT(us)  F
    1.204113       4127    4131    9    1      OP_MSG   insert        124        45 412.233  -

  (mongo_snoop.d adds a last column ``ERR``, the reply's error code: see error_code)

* JSON lines, as written by ``mongolatency.py --events FILE`` / ``mongosnoop.py -j``
  and by ``mongoprobe latency --events FILE``; Parquet (``FILE.parquet``, a recorded
  run's ``latency.events.parquet``);
* the wire probes' own events (``formats/wire_slices``, on CLOCK_MONOTONIC):
  :func:`from_mono`.

Columns (one row per request, at its first reply):

    time        float64  wall clock, seconds since the epoch (NaN if unknown)
    elapsed_s   float64  seconds since the probe started (NaN for JSON input)
    pid, tid    int64
    fd          int64    connection (file descriptor in the server)
    request_id  int64    requestID of the request
    opcode      str      OP_MSG, OP_QUERY, ...
    command     str      command name as on the wire
    bytes_in    int64    request length
    bytes_out   int64    length of the first reply
    latency_ns  int64    server-side latency
    stream      bool     the reply had moreToCome (an exhaust stream followed)
    error_code  int64    0: the reply did not fail; else it had ok: 0, and this is its
                         code (-1: none readable; ``mongoprobe.wire.error_codes``). 0 also
                         where the source does not check replies (mongo_snoop.bt, a
                         mongo_snoop.d without the ERR column, events recorded before
                         the probes did: :func:`snoop_checks_replies`)
"""

from __future__ import annotations

import json
import re
from typing import Iterable

import pandas as pd

from .errors import FormatError

COLUMNS = ["time", "elapsed_s", "pid", "tid", "fd", "request_id", "opcode", "command",
           "bytes_in", "bytes_out", "latency_ns", "stream", "error_code"]
_INT = ["pid", "tid", "fd", "request_id", "bytes_in", "bytes_out", "latency_ns",
        "error_code"]

_SNOOP = re.compile(
    r"^(\d+)\.(\d{6})\s+(\d+)\s+(\d+)\s+(-?\d+)\s+(-?\d+)\s+(\S+)\s+(\S*?)\s+(\d+)\s+(\d+)"
    r"\s+(\d+)\.(\d{3})\s+([m-])(?:\s+(-?\d+))?$")


def empty() -> pd.DataFrame:
    return typed(pd.DataFrame(columns=COLUMNS))


def typed(df: pd.DataFrame) -> pd.DataFrame:
    if "error_code" not in df.columns:
        df["error_code"] = 0                # a source that does not check replies
    df["error_code"] = df["error_code"].fillna(0)
    for c in _INT:
        df[c] = df[c].astype("int64")
    for c in ("time", "elapsed_s"):
        df[c] = df[c].astype("float64")
    df["stream"] = df["stream"].astype(bool)
    for c in ("opcode", "command"):
        df[c] = df[c].astype(str)
    return df[COLUMNS]


def parse_snoop_line(line: str) -> dict | None:
    """One mongo_snoop.bt event line as a row dict, or None if it is not one."""
    m = _SNOOP.match(line.strip())
    if not m:
        return None
    return {"time": float("nan"), "elapsed_s": int(m[1]) + int(m[2]) / 1e6,
            "pid": int(m[3]), "tid": int(m[4]), "fd": int(m[5]), "request_id": int(m[6]),
            "opcode": m[7], "command": m[8], "bytes_in": int(m[9]), "bytes_out": int(m[10]),
            "latency_ns": int(m[11]) * 1000 + int(m[12]), "stream": m[13] == "m",
            "error_code": int(m[14] or 0)}


def snoop_checks_replies(lines: Iterable[str]) -> bool:
    """Whether snoop output says which replies failed: its header line ends in the ERR
    column (mongo_snoop.d); without it, failures are unknown, not zero."""
    for line in lines:
        if line.startswith("TIME(s)"):
            return line.split()[-1] == "ERR"
    return False


def parse_snoop(lines: Iterable[str], source: str = "<snoop>") -> pd.DataFrame:
    """mongo_snoop.bt / mongo_snoop.d text output. Banner, header, comments, blank lines
    and mongo_snoop.d's footer (``requests:``, ``lost:``, the ``tls:`` block, ``(dropped
    events...``: everything from ``requests:`` on) are skipped."""
    rows = []
    footer = False
    warning = False         # inside a bpftrace 0.23 helper warning (see below)
    helper_errors = 0
    for n, line in enumerate(lines, 1):
        s = line.strip()
        # bpftrace 0.23 prints a failed helper (a delete of a key not there) on
        # stdout among the events: "FILE:L:C: WARNING: Can't delete ...",
        # "Additional Info - helper: NAME, retcode: N", the source line, a line of
        # ~ under the call: counted, skipped through the ~ line
        if not warning and "WARNING: " in s and parse_snoop_line(s) is None:
            warning, helper_errors = True, helper_errors + 1
        if warning:
            warning = not (s and set(s) == {"~"})
            continue
        footer = footer or s.startswith("requests: ")
        if footer or not s or s.startswith(("#", "TIME", "Tracing", "Attaching", "@",
                                            "lost: ", "(dropped events", "TLS plaintext")):
            continue
        row = parse_snoop_line(s)
        if row is None:
            raise FormatError(source, n, "a mongo_snoop.bt event line", s)
        rows.append(row)
    df = typed(pd.DataFrame(rows, columns=COLUMNS)) if rows else empty()
    df.attrs["helper_errors"] = helper_errors
    return df


def from_mono(ev: pd.DataFrame, clock, pid: int) -> pd.DataFrame:
    """The wire probes' events (``formats.wire_slices.EVENT_COLUMNS``, CLOCK_MONOTONIC
    ``mono_ns``) as this table: ``time`` on the wall clock by ``clock`` (the run's
    ``model.clock.Clock``), ``elapsed_s`` unknown."""
    df = pd.DataFrame({
        "time": clock.wall_s(ev["mono_ns"].to_numpy(dtype="int64")),
        "elapsed_s": float("nan"), "pid": pid, "tid": ev["tid"], "fd": ev["fd"],
        "request_id": ev["request_id"], "opcode": ev["opcode"], "command": ev["command"],
        "bytes_in": ev["bytes_in"], "bytes_out": ev["bytes_out"],
        "latency_ns": ev["latency_ns"], "stream": ev["stream"],
        "error_code": ev["error_code"] if "error_code" in ev.columns else 0})
    return typed(df) if len(df) else empty()


def write_parquet(df: pd.DataFrame, path) -> None:
    """The table as Parquet (columnar, compressed: what ``record --events`` keeps)."""
    df.to_parquet(path, index=False, compression="zstd")


def read_parquet(path) -> pd.DataFrame:
    return typed(pd.read_parquet(path))


def write_events(df: pd.DataFrame, path) -> None:
    """``FILE.parquet`` as Parquet, anything else as JSON lines."""
    if str(path).endswith(".parquet"):
        write_parquet(df, path)
    else:
        with open(path, "w") as fh:
            write_events_json(df, fh)


def parse_events_json(lines: Iterable[str], source: str = "<events>") -> pd.DataFrame:
    """JSON-lines events (one object per request)."""
    rows = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            rows.append({c: rec.get(c, float("nan") if c in ("time", "elapsed_s") else None)
                         for c in COLUMNS})
            if rows[-1]["latency_ns"] is None:
                raise KeyError("latency_ns")
        except (ValueError, KeyError, AttributeError):
            raise FormatError(source, n, "a JSON event with request_id, command, latency_ns", line)
        rows[-1]["stream"] = bool(rows[-1]["stream"])
    return typed(pd.DataFrame(rows, columns=COLUMNS)) if rows else empty()


def write_events_json(df: pd.DataFrame, fh) -> None:
    for rec in df.to_dict(orient="records"):
        rec = {k: (None if isinstance(v, float) and v != v else v) for k, v in rec.items()}
        fh.write(json.dumps(rec) + "\n")
