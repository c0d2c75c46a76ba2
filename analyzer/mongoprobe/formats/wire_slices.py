"""The wire probes' per-second aggregates: one :class:`Slice` per second of the kernel's
monotonic clock, whichever probe printed it.

``probes/mongo_latency.bt`` (read by ``formats/bpftrace_latency.py``) and
``probes/mongolatency.py --slices`` (read here, :func:`read_bcc_slices`) both cut the
kernel's time into one-second slices and count, per (command, opcode), the requests
answered in each with their latency in log-linear buckets (``mongoprobe.model.loglinear_buckets``).
A slice is printed once nothing writes it any more, so slices add up to the run exactly.

A slice carries the loss counters as they stood when it was printed (cumulative, in the
shape of ``latency --json``'s ``counts`` and ``lost``), so the losses of any window are
differences of counters.

Per-request events, when the probe was asked for them (every request, or one in N), are
rows of :data:`EVENT_COLUMNS` (times on CLOCK_MONOTONIC until ``mongoprobe.model.latencies``
maps them to the wall clock).
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from typing import IO, Iterable

import numpy as np
import pandas as pd

from .errors import FormatError

from mongoprobe.wire import facts as wirefacts
from mongoprobe.wire.facts import COUNT_KEYS, LOST_KEYS, OPCODES  # noqa: F401 (the API)
from mongoprobe.wire.facts import Agg  # one (command, opcode) or connection in one slice

# one request: the probe's own event; ``mono_ns`` is the send that carried its first
# reply, on CLOCK_MONOTONIC; ``error_code`` 0 when the reply did not fail, else its
# code (-1: failed, no code readable; ``mongoprobe.wire.error_codes``)
EVENT_COLUMNS = {"mono_ns": "int64", "latency_ns": "int64", "tid": "int64", "fd": "int64",
                 "request_id": "int64", "opcode": "str", "command": "str",
                 "bytes_in": "int64", "bytes_out": "int64", "stream": "bool",
                 "error_code": "int64"}


opcode_name = wirefacts.opcode_name


def name_of_words(w0: int, w1: int, w2: int) -> str:
    """A command name the probes carry as three little-endian 8-byte words (its first
    24 bytes, zero after the name)."""
    raw = struct.pack("<QQQ", w0 & (2**64 - 1), w1 & (2**64 - 1), w2 & (2**64 - 1))
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace")


@dataclass
class Slice:
    start_ns: int                  # CLOCK_MONOTONIC
    length_ns: int
    rows: dict[tuple[str, str], Agg] = field(default_factory=dict)   # (command, opcode)
    conn_rows: dict[int, Agg] = field(default_factory=dict)          # fd
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(COUNT_KEYS, 0))
    lost: dict[str, int] = field(default_factory=lambda: dict.fromkeys(LOST_KEYS, 0))


def events_frame(rows: list[tuple]) -> pd.DataFrame:
    """A typed events table of rows in EVENT_COLUMNS order, in time order."""
    if not rows:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in EVENT_COLUMNS.items()})
    df = pd.DataFrame(rows, columns=list(EVENT_COLUMNS)).astype(EVENT_COLUMNS)
    return df.sort_values("mono_ns", kind="stable").reset_index(drop=True)


# --- mongolatency.py --slices ----------------------------------------------------------


class BccSlices:
    """``mongolatency.py --slices`` lines, fed one at a time: a slice per line, then
    ``{"end": true, ...}`` with the final counters (requests still waiting counted as
    lost). ``feed`` returns the slice a line completes."""

    def __init__(self, source: str = "mongolatency.py --slices") -> None:
        self.source = source
        self.final: dict | None = None
        self.full: dict[str, int] = {}      # map -> refusals (part of dropped)
        self.lineno = 0

    def feed(self, line: str) -> Slice | None:
        self.lineno += 1
        line = line.strip()
        if not line.startswith("{"):
            return None
        try:
            d = json.loads(line)
        except json.JSONDecodeError as e:
            raise FormatError(self.source, self.lineno, "a JSON slice line", line) from None
        if d.get("end"):
            self.final = {"counts": {**dict.fromkeys(COUNT_KEYS, 0), **d["counts"]},
                          "lost": d["lost"], "untraced": d.get("untraced", {}),
                          "tls": d.get("tls"),
                          "answered_no_reply": d.get("answered_no_reply_by_command", {})}
            self.full = {k: int(v) for k, v in d.get("full", {}).items()}
            return None
        s = Slice(int(d["start_ns"]), int(d["length_ns"]),
                  # (an older probe's line has no answered_no_reply)
                  counts={k: int(d["counts"].get(k, 0)) for k in COUNT_KEYS},
                  lost={k: int(d["lost"][k]) for k in LOST_KEYS})
        for cmd, op, *rest in d["rows"]:
            s.rows[(str(cmd), str(op))] = Agg.from_row(rest)
        for fd, *rest in d.get("conn_rows", []):
            s.conn_rows[int(fd)] = Agg.from_row(rest)
        return s


def read_bcc_slices(lines: Iterable[str], source: str = "mongolatency.py --slices"
                    ) -> tuple[list[Slice], dict | None]:
    """Every slice of a whole output, and its final counters (None if it was cut)."""
    r = BccSlices(source)
    out = [s for s in map(r.feed, lines) if s is not None]
    return out, r.final


# --- mongolatency.py --events-format raw -----------------------------------------------

RAW_MAGIC = b"mongoprobe-events-raw 1\n"
# struct mw_event of probes/mongo_wire.h
RAW_DTYPE = np.dtype([("ts", "<u8"), ("latency_ns", "<u8"), ("cmd", "S24"), ("tid", "<u4"),
                      ("fd", "<u4"), ("request_id", "<u4"), ("opcode", "<u4"),
                      ("bytes_in", "<u4"), ("bytes_out", "<u4"), ("stream", "<u4"),
                      ("error_code", "<i4")])


def read_raw_events(fh: IO[bytes], source: str = "events") -> tuple[dict, pd.DataFrame]:
    """The header and the events of a ``--events-format raw`` file; a record cut short
    at the end (the probe was killed while writing) is left out."""
    if fh.read(len(RAW_MAGIC)) != RAW_MAGIC:
        raise FormatError(source, 1, "mongolatency.py's raw events header")
    header = json.loads(fh.readline())
    if header.get("record_bytes") != RAW_DTYPE.itemsize:
        raise FormatError(source, 2, f"records of {RAW_DTYPE.itemsize} bytes",
                          str(header.get("record_bytes")))
    data = fh.read()
    a = np.frombuffer(data[: len(data) - len(data) % RAW_DTYPE.itemsize], dtype=RAW_DTYPE)
    df = pd.DataFrame({
        "mono_ns": a["ts"].astype("int64"), "latency_ns": a["latency_ns"].astype("int64"),
        # fd: bit 31 marks a TLS connection's plaintext state (probes/mongo_tls.h)
        "tid": a["tid"].astype("int64"), "fd": (a["fd"] & 0x7FFFFFFF).astype("int64"),
        "request_id": a["request_id"].astype("int64"),
        "opcode": [opcode_name(o) for o in a["opcode"]],
        "command": [c.split(b"\0", 1)[0].decode("utf-8", "replace") for c in a["cmd"]],
        "bytes_in": a["bytes_in"].astype("int64"), "bytes_out": a["bytes_out"].astype("int64"),
        "stream": a["stream"].astype(bool), "error_code": a["error_code"].astype("int64")})
    return header, df.astype(EVENT_COLUMNS)
