"""Packet captures (pcap, pcapng) -> one row per MongoDB wire-protocol message, in bulk.

tshark dissects; pandas reads. The capture is read by ``tshark -T fields`` with the
port decoded as MongoDB (``-d tcp.port==N,mongo``; without it tshark dissects 27017 as
TLS) and ``-E occurrence=a`` (every occurrence of a field in a frame, joined by
``\x1f``). Its stdout is read in blocks of a few MB, each block parsed by
``pandas.read_csv`` and turned into message rows with column operations: no Python
object per packet, and memory bounded by the block, not by the capture.

On two cores the capture is split by direction (``pcap/pcapfile.py``) between two
tshark processes reading their half from a pipe: the requests with every field below,
the replies with the header fields only (``REPLY_FIELDS``); their blocks come in as
each is ready (``iter_messages``). One tshark reads the file itself when the router
cannot parse its link type, or with ``workers=1``.

    tshark -r FILE|- -n -d tcp.port==N,mongo -o ... (SPEED_PREFS)
           -Y "(tcp.len > 0 or tcp.flags.syn == 1 or tcp.flags.fin == 1)[ and tcp.dstport == N]"
           -T fields -e frame.number -e frame.time_epoch -e tcp.stream -e tcp.srcport
           -e tcp.dstport -e tcp.len -e tcp.segment -e tcp.seq_raw -e tcp.flags.syn
           -e tcp.flags.fin -e _ws.malformed
           -e mongo.message_length -e mongo.request_id -e mongo.response_to
           -e mongo.opcode -e mongo.msg.flags -e mongo.msg.sections.section.kind
           -e mongo.compression.original_opcode -e mongo.compression.compressor
           -e mongo.full_collection_name -e mongo.element.name -e mongo.element.type
           -e mongo.element.value.string -E occurrence=a -E aggregator=0x1f

(field names as ``tshark -G fields`` lists them for Wireshark 4.0, Debian 12).

How messages come out of frames:

* tshark's TCP reassembly joins a message spanning segments; its fields appear on the
  frame that completes it, with ``tcp.segment`` listing the frames it came from (the
  first of them gives ``first_time``).
* A frame completing several messages repeats the per-message fields: header fields
  once per message (aligned by position), ``mongo.msg.flags`` once per OP_MSG, the
  compression fields once per OP_COMPRESSED, ``full_collection_name`` once per
  legacy message, so each is given to the k-th message of its kind.
* The command name is the first element of the OP_MSG body (when the body is the
  first section), of the OP_QUERY query on ``db.$cmd`` (inside ``$query`` when
  wrapped; any other namespace is ``find``), or the legacy opcode's name (insert,
  update, delete, getMore, killCursors). ``database`` is the OP_MSG's ``$db`` (the
  first string element of that name) or the namespace's database part;
  ``collection`` is the command's string value (``{find: "coll"}``; ``getMore``'s
  ``collection`` field) or the namespace's collection part.
* tshark decompresses OP_COMPRESSED (zlib, snappy here; not zstd) and dissects the
  message inside; the row keeps the wire opcode (2012) with ``compressed`` and
  ``original_opcode``.
* Gaps and retransmissions come from ``tcp.seq_raw`` per direction (tshark's own
  sequence analysis is off, see SPEED_PREFS): a frame after a gap counts in
  ``lost_segments``; a frame whose bytes all came before (a retransmission) in
  ``retransmitted``, and its messages, which tshark would dissect again, are dropped.

When tshark's fields cannot name a request — several messages completed in one frame
(their element lists run together), an OP_MSG whose first section is a document
sequence, a body tshark did not decompress (zstd), a frame tshark marks malformed,
or an element list that does not split cleanly — the message is decoded by
mongoprobe's own ``wire.py`` from the frame's bytes, read in a second, filtered
tshark pass (``-e tcp.reassembled.data -e tcp.payload`` for those frames only), the
message found by its header (all four header fields are known from the first pass).
``decoded_by`` says which decoder named it; one that neither can name keeps its row,
with ``command`` None and the reason in ``note``: nothing is silently lost.

A capture that starts inside a message (a ring-buffer file, a capture begun while a
large message was in flight) makes tshark read the message's tail as a header; with a
huge "length" it waits for that message to the end of the file and frames nothing
more in that direction. Such directions are found (payload left unframed at the end,
``Decode.unframed``) and decoded again by ``wire_stream.StreamDecoder`` from their raw
payload, which skips to the next plausible header (:func:`resync`; a warning line
says how many bytes were skipped).

Columns (one row per message, in capture order):

    frame            int64    frame that completed the message (tshark's frame.number)
    msg_in_frame     int64    position among the messages that frame completed (0, 1...)
    time             float64  wall clock of that frame, seconds since the epoch
    time_ns          int64    the same, integer nanoseconds (exact)
    first_time_ns    int64    wall clock of the message's first segment (== time_ns
                              unless reassembled from several segments)
    stream           int64    tshark's TCP stream index (one per connection)
    client_port      int64    the client's TCP port
    direction        str      "request" (to the server port) or "reply" (from it)
    length           int64    messageLength
    request_id       int64    requestID (unsigned 32-bit, as tshark shows it)
    response_to      int64    responseTo
    opcode           int64    opcode on the wire (2013 OP_MSG, 2012 OP_COMPRESSED...)
    flags            Int64    OP_MSG flagBits (<NA> for other opcodes)
    more_to_come     bool     OP_MSG moreToCome (bit 1)
    exhaust_allowed  bool     OP_MSG exhaustAllowed (bit 16)
    command          object   requests: the command name as on the wire; replies: None
    database         object   requests: $db or the namespace's database; replies: None
    collection       object   requests: the command's collection when it names one
    compressed       bool     the message was OP_COMPRESSED
    original_opcode  Int64    the wrapped opcode of an OP_COMPRESSED message, else <NA>
    compressor       object   noop, snappy, zlib, zstd (compressed messages), else None
    decoded_by       str      "tshark", or "wire.py" when the fallback named it
    note             object   why a request has no command (None when it has one)

Strings are as tshark prints them: a tab or newline inside a name shows as ``\\t``,
``\\n``.
"""

from __future__ import annotations

import io
import os
import queue
import re
import shutil
import struct
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pandas as pd

from mongoprobe.wire import decode as wire, stream as wire_stream
from . import pcapfile

AGG = "\x1f"        # joins a field's occurrences in one frame; rare in names and strings
SERVER_PORT_DEFAULT = 27017

# (column, tshark field): the order of -e options and of read_csv's columns.
FIELDS: list[tuple[str, str]] = [
    ("frame", "frame.number"),
    ("time_epoch", "frame.time_epoch"),
    ("stream", "tcp.stream"),
    ("srcport", "tcp.srcport"),
    ("dstport", "tcp.dstport"),
    ("tcp_len", "tcp.len"),
    ("segments", "tcp.segment"),
    ("seq", "tcp.seq_raw"),
    ("syn", "tcp.flags.syn"),
    ("fin", "tcp.flags.fin"),
    ("malformed", "_ws.malformed"),
    ("length", "mongo.message_length"),
    ("request_id", "mongo.request_id"),
    ("response_to", "mongo.response_to"),
    ("opcode", "mongo.opcode"),
    ("flags", "mongo.msg.flags"),
    ("kinds", "mongo.msg.sections.section.kind"),
    ("original_opcode", "mongo.compression.original_opcode"),
    ("compressor", "mongo.compression.compressor"),
    ("namespace", "mongo.full_collection_name"),
    ("names", "mongo.element.name"),
    ("types", "mongo.element.type"),
    ("strings", "mongo.element.value.string"),
]
# The fields a reply needs (header, flags, compression): the element lists, by far the
# most text tshark writes, are only read for requests.
REPLY_FIELDS = [f for f in FIELDS if f[0] not in ("kinds", "namespace", "names", "types",
                                                    "strings")]
# Work tshark does for its own display that the fields never show (about 5% of its
# time here; the fields come out byte for byte the same). Sequence analysis is off: it
# keeps data for every frame to the end of the file (tshark's memory grew 180 -> 922 MB
# over a 1 GB capture; flat at 160 MB without it), and what the decoder used of it,
# gaps in the capture, is found from tcp.seq_raw instead (_Blocks._sequence).
SPEED_PREFS = ["-o", "tcp.analyze_sequence_numbers:FALSE",
               "-o", "tcp.summary_in_tree:FALSE", "-o", "ip.summary_in_tree:FALSE",
               "-o", "tcp.calculate_timestamps:FALSE", "-o", "tcp.track_bytes_in_flight:FALSE",
               "-o", "ip.use_geoip:FALSE", "-o", "ip.decode_tos_as_diffserv:FALSE",
               "-o", "frame.generate_bits_field:FALSE"]
# Frames with TCP payload carry (parts of) messages; a SYN starts a direction's sequence
# and a FIN ends it (a gap just before it is a segment the capture missed).
DISPLAY_FILTER = "tcp.len > 0 or tcp.flags.syn == 1 or tcp.flags.fin == 1"

COLUMNS = ["frame", "msg_in_frame", "time", "time_ns", "first_time_ns", "stream",
           "client_port", "direction", "length", "request_id", "response_to", "opcode",
           "flags", "more_to_come", "exhaust_allowed", "command", "database", "collection",
           "compressed", "original_opcode", "compressor", "decoded_by", "note"]
_INT = ["frame", "msg_in_frame", "time_ns", "first_time_ns", "stream", "client_port",
        "length", "request_id", "response_to", "opcode"]

_MSG_OPS = {wire.OP_MSG}
_NS_OPS = {wire.OP_QUERY, wire.OP_INSERT, wire.OP_UPDATE, wire.OP_DELETE, wire.OP_GET_MORE}
_LEGACY_COMMAND = {wire.OP_INSERT: "insert", wire.OP_UPDATE: "update",
                   wire.OP_DELETE: "delete", wire.OP_GET_MORE: "getMore",
                   wire.OP_KILL_CURSORS: "killCursors"}
# BSON element types whose value tshark shows as mongo.element.value.string (string,
# DBPointer, JavaScript code, symbol, code with scope): the k-th string belongs to
# the k-th element of one of these types.
_STRING_TYPES = {"0x02", "0x0c", "0x0d", "0x0e", "0x0f"}
_HEADER = struct.Struct("<iIIi")

CUT_SHORT = "cut short in the middle of a packet"
# columns read as numbers (NaN when the frame has none)
_NUMERIC = ("stream", "srcport", "dstport", "tcp_len", "seq")


class PcapError(ValueError):
    """A capture tshark cannot read at all, or tshark missing; one line, names the file."""


def empty() -> pd.DataFrame:
    return _typed(pd.DataFrame({c: [] for c in COLUMNS}))


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    for c in _INT:
        df[c] = df[c].astype("int64")
    df["time"] = df["time"].astype("float64")
    for c in ("flags", "original_opcode"):
        df[c] = df[c].astype("Int64")
    for c in ("more_to_come", "exhaust_allowed", "compressed"):
        df[c] = df[c].astype(bool)
    for c in ("command", "database", "collection", "compressor", "note", "direction",
              "decoded_by"):
        col = df[c].astype(object)
        df[c] = col.where(col.notna(), None)
    return df[COLUMNS]


# --- the decode and what it saw -------------------------------------------------------


@dataclass
class Decode:
    """One decode of one capture: counters filled while its messages are read.

    ``lost_segments``: frames tshark flags as following a gap in the capture (a segment
    the capture missed; its messages cannot be decoded); ``malformed_frames``: frames
    tshark marks malformed; ``fallback``: messages sent to wire.py, ``unnamed`` the
    requests neither decoder could name. ``cut_short``: tshark's message when the file
    ends inside a packet; ``error``: any other tshark error line.
    """

    path: str | list
    port: int
    frames: int = 0                  # frames with TCP payload (or a gap) read
    messages: int = 0
    lost_segments: int = 0
    retransmitted: int = 0           # frames whose payload was all sent before (dropped)
    malformed_frames: int = 0
    first_segment_unknown: int = 0   # first_time_ns fell back to the completing frame
    fallback: int = 0
    unnamed: int = 0
    port_frames: int = 0             # frames with payload to or from the port
    other_ports: Counter = field(default_factory=Counter)   # TCP ports seen (wrong --port?)
    hint_port: int | None = None     # the server port detect_port() found (wrong --port)
    # (stream, source port) -> (first frame, bytes) of payload tshark never framed
    unframed: dict = field(default_factory=dict)
    resynced: int = 0                # messages wire.py recovered from those bytes
    warnings: list = field(default_factory=list)   # one-line notes (not failures)
    last_frame: int = 0
    cut_short: str | None = None
    error: str | None = None
    returncode: int | None = None
    workers: int = 1                 # tshark processes that decoded it (2: split by direction)
    inconsistent: str | None = None  # the two sides disagreed (the decode must be redone)
    paths: list = field(default_factory=list)
    _need: list = field(default_factory=list, repr=False)  # frames for the wire.py pass

    def __post_init__(self) -> None:
        # several files (a ring buffer) are read as one capture
        if not isinstance(self.path, str):
            self.paths = [str(p) for p in self.path]
            self.path = self.paths[0] if len(self.paths) == 1 else \
                f"{self.paths[0]} .. {os.path.basename(self.paths[-1])} ({len(self.paths)} files)"
        elif not self.paths:
            self.paths = [self.path]

    def reset(self) -> None:
        """Back to a decode that has read nothing (its counters zero), in place."""
        self.__init__(self.paths if len(self.paths) > 1 else self.paths[0], self.port)

    @property
    def problem(self) -> str | None:
        """The one-line diagnostic for this capture, or None when it read cleanly."""
        if self.cut_short:
            return f"{self.path}: {self.cut_short}; decoded {self.messages} messages before it"
        if self.error:
            return f"{self.path}: {self.error}"
        if self.messages == 0:
            if self.port_frames:
                return (f"{self.path}: no MongoDB messages on TCP port {self.port}: its "
                        f"{self.port_frames} frames with payload do not decode as the "
                        "MongoDB wire protocol")
            if self.other_ports:
                hint = f"; its connections go to port {self.hint_port}: try --port " \
                    f"{self.hint_port}" if self.hint_port else \
                    " (TCP ports in it: " + ", ".join(
                        str(p) for p, _ in self.other_ports.most_common(5)) + ")"
                return f"{self.path}: no traffic on TCP port {self.port}{hint}"
            return f"{self.path}: no TCP payload at all, so no MongoDB messages"
        return None


def tshark_command(path: str, port: int, fields: list[tuple[str, str]] = FIELDS,
                   display_filter: str = DISPLAY_FILTER) -> list[str]:
    """The tshark run reading ``path`` ("-": its standard input)."""
    cmd = ["tshark", "-r", path, "-n", "-d", f"tcp.port=={int(port)},mongo", *SPEED_PREFS]
    if display_filter:
        cmd += ["-Y", display_filter]
    cmd += ["-T", "fields"]
    for _, f in fields:
        cmd += ["-e", f]
    return cmd + ["-E", "occurrence=a", "-E", f"aggregator={AGG}", "-E", "separator=/t",
                  "-E", "quote=n", "-E", "header=n"]


def _check_tshark() -> None:
    if shutil.which("tshark") is None:
        raise PcapError("tshark is not installed (Debian: apt-get install tshark; "
                        "scripts/setup.sh does it)")


class _Tshark:
    """tshark as a subprocess: stdout read by the caller, stderr collected in a thread.
    ``stdin=True``: it reads the capture from a pipe (``-r -``), written by a Router."""

    def __init__(self, cmd: list[str], stdin: bool = False) -> None:
        _check_tshark()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.stderr: list[str] = []
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    @classmethod
    def over(cls, paths: list[str], port: int, fields: list[tuple[str, str]],
             display_filter: str) -> "_Tshark":
        """One tshark over one file, or over several read as one (fed by a Router)."""
        if len(paths) == 1:
            return cls(tshark_command(paths[0], port, fields, display_filter))
        ts = cls(tshark_command("-", port, fields, display_filter), stdin=True)
        ts.router = pcapfile.Router(paths, port, [ts.proc.stdin]).start()
        return ts

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self.stderr.append(line.decode("utf-8", "replace"))

    def blocks(self, size: int) -> Iterator[bytes]:
        """stdout in blocks of whole lines, about ``size`` bytes each."""
        rest = b""
        while True:
            data = self.proc.stdout.read(size)
            if not data:
                break
            data = rest + data
            cut = data.rfind(b"\n") + 1
            if cut == 0:
                rest = data
                continue
            rest = data[cut:]
            yield data[:cut]
        if rest.strip():
            yield rest + b"\n"

    router = None

    def close(self) -> int:
        self.proc.stdout.close()
        if self.router is not None:
            self.router.stop()
        rc = self.proc.wait()
        self._t.join(10)
        if self.router is not None:
            self.router.join(10)
        return rc

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()

    def error_lines(self) -> list[str]:
        skip = ("Running as user", "dangerous")
        return [s.strip() for s in self.stderr if s.strip() and not any(k in s for k in skip)]


def _finish(ts: _Tshark, dec: Decode, router: "pcapfile.Router | None" = None) -> None:
    rc = ts.close()
    dec.returncode = rc if dec.returncode in (0, None) else dec.returncode
    router = router or ts.router
    if router is not None and (router.cut_short or router.error):
        what = "cut short in the middle of a packet" if router.cut_short else \
            "damaged or corrupt"
        dec.cut_short = f"capture {what} after frame {router.frames}"
        return
    for line in ts.error_lines():
        if CUT_SHORT in line or "appears to be damaged or corrupt" in line:
            what = "cut short in the middle of a packet" if CUT_SHORT in line else \
                "damaged or corrupt"
            dec.cut_short = f"capture {what} after frame {dec.last_frame}"
            return
    lines = ts.error_lines()
    if dec.returncode not in (0, None) and lines:
        msg = re.sub(r"^tshark:\s*", "", lines[0])
        dec.error = f"tshark: {msg}"


# --- parsing helpers (whole columns at a time) --------------------------------------------


def _epoch_ns(s: pd.Series) -> np.ndarray:
    """'1795343538.929295683' -> int64 ns, exactly (a float64 would round to ~0.2 us)."""
    a = np.asarray(s.to_numpy(dtype=object), dtype="U")
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    parts = np.char.partition(a, ".")
    frac = np.char.ljust(parts[:, 2], 9, "0").astype("U9")   # casting truncates to 9 digits
    return parts[:, 0].astype(np.int64) * 1_000_000_000 + frac.astype(np.int64)


def _hex(values) -> np.ndarray:
    """'0x0000002a' strings (tshark's BASE_HEX) -> int64."""
    a = np.asarray(values, dtype="S")
    if a.size == 0:
        return np.zeros(0, dtype=np.int64)
    if a.dtype.itemsize == 10:
        d = a.view(np.uint8).reshape(-1, 10)[:, 2:].astype(np.int64)
        d = np.where(d >= 97, d - 87, np.where(d >= 65, d - 55, d - 48))
        return (d << np.arange(28, -1, -4, dtype=np.int64)).sum(axis=1)
    return np.asarray([int(v, 16) for v in a.tolist()], dtype=np.int64)


def _first(s: pd.Series) -> pd.Series:
    return s.str.partition(AGG)[0]


# --- one block of tshark lines -> message rows ---------------------------------------------


class _Blocks:
    """Turns blocks of tshark lines into message rows; keeps what spans blocks (the frame
    times of the previous block, for messages reassembled from earlier frames; the next
    expected sequence number of each direction).

    ``fields``: the columns tshark was asked for (missing ones read as empty);
    ``frame_map``: when tshark read one side of a split capture, its frame numbers are
    local and mapped back to the capture's; ``direction``: "request" or "reply" to keep
    only that side's rows (a split side also sees the other side's first packets)."""

    def __init__(self, dec: Decode, fields: list[tuple[str, str]] = FIELDS,
                 frame_map: "pcapfile.FrameMap | None" = None,
                 direction: str | None = None) -> None:
        self.dec = dec
        self.fields = fields
        self.fmap = frame_map
        self.direction = direction
        self.prev_frames = np.zeros(0, dtype=np.int64)
        self.prev_times = np.zeros(0, dtype=np.int64)
        self.trail: dict[str, list[int]] = {}   # direction -> [first frame, bytes] unframed
        self.expect: dict[str, int] = {}        # direction -> next sequence number
        self.stream_ports: dict[int, int] = {}  # stream -> client port (split check)
        self.upto = 0                           # capture frame of the last line read

    def read(self, block: bytes) -> pd.DataFrame:
        """One block of lines: the TCP numbers parsed as numbers by read_csv (NaN when
        absent), the rest as text ("" when absent)."""
        names = [c for c, _ in self.fields]
        kw = dict(sep="\t", header=None, names=names, quoting=3, keep_default_na=False,
                  encoding="utf-8", encoding_errors="replace", engine="c")
        try:
            dtype = {c: "float64" if c in _NUMERIC else object for c in names}
            dtype["frame"] = "int64"
            df = pd.read_csv(io.BytesIO(block), dtype=dtype, na_filter=True,
                             na_values={c: [""] for c in _NUMERIC}, **kw)
        except ValueError:
            # a packet with two TCP headers (an ICMP error quoting one): its first
            df = pd.read_csv(io.BytesIO(block), dtype=object, na_filter=False, **kw)
            df["frame"] = df["frame"].astype(np.int64)
            for c in _NUMERIC:
                df[c] = pd.to_numeric(_first(df[c]).replace("", np.nan))
        for c, _ in FIELDS:
            if c not in df.columns:
                df[c] = ""
        return self.messages(df)

    def messages(self, df: pd.DataFrame) -> pd.DataFrame:
        dec = self.dec
        if df.empty:
            return empty()
        frames = df["frame"].to_numpy(np.int64)
        orig = self.fmap.lookup(frames) if self.fmap is not None else frames
        times = _epoch_ns(df["time_epoch"])
        self.upto = int(orig[-1])
        dec.last_frame = max(dec.last_frame, self.upto)
        stream = df["stream"].to_numpy(np.float64)
        tcp = ~np.isnan(stream)
        tcp_len = np.nan_to_num(df["tcp_len"].to_numpy(np.float64)).astype(np.int64)
        sport = np.nan_to_num(df["srcport"].to_numpy(np.float64)).astype(np.int64)
        dport = np.nan_to_num(df["dstport"].to_numpy(np.float64)).astype(np.int64)
        # one number per direction: stream << 16 | source port
        key = np.where(tcp, np.nan_to_num(stream).astype(np.int64) << 16 | sport, -1)
        payload = tcp & (tcp_len > 0)
        dec.frames += int(payload.sum())
        lost, dup = self._sequence(df, key, tcp_len)
        dec.lost_segments += int(lost.sum())
        dec.retransmitted += int(dup.sum())
        # a retransmission's bytes, dissected again as if new (no sequence analysis),
        # are no message: its frame, dropped, is not malformed
        dec.malformed_frames += int(((df["malformed"].to_numpy(object) != "") & ~dup).sum())
        to_port = dport == dec.port
        from_port = sport == dec.port
        on = payload & (to_port | from_port)
        if self.direction == "request":
            on &= to_port
        elif self.direction == "reply":
            on &= from_port
        dec.port_frames += int(on.sum())
        has_msg = df["length"].to_numpy(object) != ""
        self._track_unframed(key[on], orig[on], has_msg[on], tcp_len[on])
        keep = on & has_msg & ~dup
        if self.direction is None:
            # frames of other ports are counted (a wrong --port), not decoded
            other = payload & ~to_port & ~from_port
            if other.any():
                dec.other_ports.update(Counter(sport[other].tolist() + dport[other].tolist()))
        m = df[keep].assign(sport=sport[keep], dport=dport[keep])
        if m.empty:
            out = empty()
        else:
            out = self._rows(m, frames, times)
            if self.fmap is not None:
                out["frame"] = orig[np.searchsorted(frames, out["frame"].to_numpy(np.int64))]
            self._queue_fallback(out)
            sp = out[["stream", "client_port"]].drop_duplicates("stream", keep="last")
            self.stream_ports.update(zip(sp["stream"].tolist(), sp["client_port"].tolist()))
        self.prev_frames, self.prev_times = frames, times
        if self.fmap is not None:
            self.fmap.release(int(frames[0]))
        dec.messages += len(out)
        return out

    def _sequence(self, df: pd.DataFrame, key: np.ndarray, tcp_len: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
        """Per row: ``lost``, it follows a gap in its direction's sequence numbers (a
        segment the capture missed); ``dup``, all its bytes came before (a
        retransmission, whose messages tshark would dissect a second time)."""
        n = len(df)
        lost, dup = np.zeros(n, dtype=bool), np.zeros(n, dtype=bool)
        seq_all = df["seq"].to_numpy(np.float64)
        idx = np.flatnonzero((key >= 0) & ~np.isnan(seq_all))
        if not len(idx):
            return lost, dup
        k = key[idx]
        seq = seq_all[idx].astype(np.int64)
        ln = tcp_len[idx]
        syn = np.isin(df["syn"].to_numpy(object)[idx], ("1", "True"))
        fin = np.isin(df["fin"].to_numpy(object)[idx], ("1", "True"))
        nxt = (seq + ln + syn + fin) & 0xFFFFFFFF
        # the previous row of the same direction: a stable sort by key
        order = np.argsort(k, kind="stable")
        ks, ns = k[order], nxt[order]
        prev_s = np.empty(len(ks), dtype=np.float64)
        prev_s[1:] = ns[:-1]
        starts = np.ones(len(ks), dtype=bool)
        starts[1:] = ks[1:] != ks[:-1]
        prev_s[starts] = np.nan
        if self.expect:
            prev_s[starts] = [self.expect.get(x, np.nan) for x in ks[starts].tolist()]
        prev = np.empty(len(k), dtype=np.float64)
        prev[order] = prev_s
        ends = np.ones(len(ks), dtype=bool)
        ends[:-1] = starts[1:]
        self.expect.update(zip(ks[ends].tolist(), ns[ends].tolist()))
        known = ~np.isnan(prev) & ~syn
        d = (seq - np.where(known, prev, 0).astype(np.int64)) & 0xFFFFFFFF
        lost[idx[known & (d != 0) & (d < 1 << 31)]] = True
        behind = known & (d >= 1 << 31)
        if behind.any():
            # a retransmission moves the expected number back in the shifted column:
            # redo those directions one segment at a time (rare)
            for kk in set(k[behind].tolist()):
                rows = np.flatnonzero(k == kk)
                e = None if np.isnan(prev[rows[0]]) else int(prev[rows[0]])
                for i in rows:
                    lost[idx[i]] = dup[idx[i]] = False
                    if syn[i] or e is None:
                        e = int(nxt[i])
                        continue
                    dd = (int(seq[i]) - e) & 0xFFFFFFFF
                    if dd == 0:
                        e = int(nxt[i])
                    elif dd < 1 << 31:
                        lost[idx[i]] = True
                        e = int(nxt[i])
                    elif 0 < (int(nxt[i]) - e) & 0xFFFFFFFF < 1 << 31:
                        e = int(nxt[i])          # overlaps and carries new bytes
                    else:
                        dup[idx[i]] = True
                self.expect[kk] = e
        return lost, dup

    def _track_unframed(self, key: np.ndarray, frames: np.ndarray, msg: np.ndarray,
                        nbytes: np.ndarray) -> None:
        """Per direction (``key``: stream << 16 | source port), the payload frames after
        the last one that completed a message: in a healthy stream none are left at the
        end. A capture that starts inside a message (a ring-buffer file, a capture begun
        mid-run) can leave tshark waiting for a "message" of garbage length that swallows
        the direction."""
        if not len(key):
            return
        last: dict[int, int] = {}
        if msg.any():
            # per key, the last frame completing a message (frames ascend)
            last = dict(zip(key[msg].tolist(), frames[msg].tolist()))
            for k in last:
                self.trail.pop(k, None)
        lastf = np.array([last.get(k, -1) for k in key.tolist()]) if last else \
            np.full(len(key), -1)
        t = (frames > lastf) & ~msg
        if t.any():
            for k, f, b in zip(key[t].tolist(), frames[t].tolist(), nbytes[t].tolist()):
                if k in self.trail:
                    self.trail[k][1] += b
                else:
                    self.trail[k] = [f, b]

    def unframed(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {(k >> 16, k & 0xFFFF): (first, nbytes)
                for k, (first, nbytes) in self.trail.items() if nbytes > 0}

    def _rows(self, m: pd.DataFrame, frames: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        several = np.array([AGG in x for x in m["length"].tolist()], dtype=bool)
        single = m[~several]
        parts = [self._single(single, frames, times)] if len(single) else []
        multi = m[several]
        if len(multi):
            parts.append(self._multi(multi, frames, times))
        out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
        out = out.sort_values(["frame", "msg_in_frame"], kind="stable", ignore_index=True)
        return _typed(out)

    def _time_of(self, frame_numbers: np.ndarray, frames: np.ndarray, times: np.ndarray,
                 fallback: np.ndarray) -> np.ndarray:
        """Times of earlier frames (first segments): this block's or the previous one's."""
        allf = np.concatenate([self.prev_frames, frames])
        allt = np.concatenate([self.prev_times, times])
        i = np.searchsorted(allf, frame_numbers)
        i = np.minimum(i, len(allf) - 1)
        found = allf[i] == frame_numbers
        self.dec.first_segment_unknown += int((~found).sum())
        return np.where(found, allt[i], fallback)

    def _single(self, s: pd.DataFrame, frames: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        n = len(s)
        fr = s["frame"].astype(np.int64).to_numpy()
        t_ns = times[np.searchsorted(frames, fr)]
        first_ns = t_ns.copy()
        seg = s["segments"].to_numpy(dtype=object) != ""
        if seg.any():
            firsts = _first(s["segments"][seg]).astype(np.int64).to_numpy()
            first_ns[seg] = self._time_of(firsts, frames, times, t_ns[seg])
        opcode = s["opcode"].astype(np.int64).to_numpy()
        orig = np.where(s["original_opcode"] != "", s["original_opcode"], "-1").astype(np.int64)
        eff = np.where(opcode == wire.OP_COMPRESSED, orig, opcode)
        has_flags = (s["flags"] != "").to_numpy()
        flags = np.zeros(n, dtype=np.int64)
        if has_flags.any():
            flags[has_flags] = _hex(s["flags"][has_flags].tolist())
        has_orig = orig >= 0
        request = s["dport"].to_numpy() == self.dec.port
        comp = s["compressor"].to_numpy(dtype=object)
        out = pd.DataFrame({
            "frame": fr, "msg_in_frame": np.zeros(n, dtype=np.int64),
            "time": t_ns / 1e9, "time_ns": t_ns, "first_time_ns": first_ns,
            "stream": s["stream"].astype(np.int64).to_numpy(),
            "client_port": np.where(request, s["sport"], s["dport"]),
            "direction": np.where(request, "request", "reply").astype(object),
            "length": s["length"].astype(np.int64).to_numpy(),
            "request_id": _hex(s["request_id"].tolist()),
            "response_to": _hex(s["response_to"].tolist()),
            "opcode": opcode,
            "flags": pd.arrays.IntegerArray(flags, ~has_flags),
            "more_to_come": (flags & wire.MORE_TO_COME) != 0,
            "exhaust_allowed": (flags & wire.EXHAUST_ALLOWED) != 0,
            "compressed": opcode == wire.OP_COMPRESSED,
            "original_opcode": pd.arrays.IntegerArray(np.where(has_orig, orig, 0), ~has_orig),
            "compressor": [wire.COMPRESSORS.get(int(c)) if c else None for c in comp],
            "decoded_by": "tshark",
        })
        # requests: name them from the element lists
        named = [(None, None, None, None)] * n
        idx = np.flatnonzero(request)
        if len(idx):
            cols = [eff[idx], s["kinds"].to_numpy(dtype=object)[idx],
                    s["namespace"].to_numpy(dtype=object)[idx],
                    s["names"].to_numpy(dtype=object)[idx],
                    s["types"].to_numpy(dtype=object)[idx],
                    s["strings"].to_numpy(dtype=object)[idx],
                    s["malformed"].to_numpy(dtype=object)[idx],
                    has_flags[idx]]
            named = list(named)
            for i, r in zip(idx.tolist(), map(_name_request, *cols)):
                named[i] = r
        out["command"] = [r[0] for r in named]
        out["database"] = [r[1] for r in named]
        out["collection"] = [r[2] for r in named]
        out["note"] = [r[3] for r in named]
        return out

    def _multi(self, s: pd.DataFrame, frames: np.ndarray, times: np.ndarray) -> pd.DataFrame:
        """Frames completing several messages: rare, so one Python step per message."""
        rows = []
        for r in s.itertuples(index=False):
            split = {c: getattr(r, c).split(AGG) if getattr(r, c) else []
                     for c in ("length", "request_id", "response_to", "opcode", "flags",
                               "original_opcode", "compressor", "namespace")}
            k = len(split["length"])
            frame = int(r.frame)
            t_ns = int(times[np.searchsorted(frames, frame)])
            first_ns = t_ns
            if r.segments:
                first_ns = int(self._time_of(np.array([int(r.segments.split(AGG)[0])]),
                                             frames, times, np.array([t_ns]))[0])
            ops = [int(x) for x in split["opcode"]]
            aligned = all(len(split[c]) == k for c in ("request_id", "response_to", "opcode"))
            comp_i = [i for i, op in enumerate(ops) if op == wire.OP_COMPRESSED]
            origs = [int(x) for x in split["original_opcode"]]
            ok_comp = len(origs) == len(comp_i)
            eff = list(ops)
            if ok_comp:
                for i, o in zip(comp_i, origs):
                    eff[i] = o
            msg_i = [i for i, op in enumerate(eff) if op in _MSG_OPS]
            ok_flags = ok_comp and len(split["flags"]) == len(msg_i)
            ns_i = [i for i, op in enumerate(eff) if op in _NS_OPS]
            ok_ns = ok_comp and len(split["namespace"]) == len(ns_i)
            flags = dict(zip(msg_i, (int(x, 16) for x in split["flags"]))) if ok_flags else {}
            ns_of = {}
            if ok_ns:
                for i, ns in zip(ns_i, split["namespace"]):
                    db, dot, coll = ns.partition(".")
                    ns_of[i] = (db or None, coll if dot else None)
            request = r.dport == self.dec.port
            for i in range(k if aligned else 0):
                f = flags.get(i)
                note = None
                if request and eff[i] not in _LEGACY_COMMAND:
                    note = "several messages in one frame"
                elif eff[i] in _MSG_OPS and f is None:
                    note = "flags not aligned with messages"
                rows.append({
                    "frame": frame, "msg_in_frame": i, "time": t_ns / 1e9, "time_ns": t_ns,
                    "first_time_ns": first_ns if i == 0 else t_ns,
                    "stream": int(r.stream),
                    "client_port": int(r.sport if request else r.dport),
                    "direction": "request" if request else "reply",
                    "length": int(split["length"][i]),
                    "request_id": int(split["request_id"][i], 16),
                    "response_to": int(split["response_to"][i], 16),
                    "opcode": ops[i], "flags": f if f is not None else pd.NA,
                    "more_to_come": bool(f and f & wire.MORE_TO_COME),
                    "exhaust_allowed": bool(f and f & wire.EXHAUST_ALLOWED),
                    "command": _LEGACY_COMMAND.get(eff[i]) if request else None,
                    "database": ns_of.get(i, (None, None))[0] if request else None,
                    "collection": ns_of.get(i, (None, None))[1] if request else None,
                    "compressed": ops[i] == wire.OP_COMPRESSED,
                    "original_opcode": eff[i] if ops[i] == wire.OP_COMPRESSED and ok_comp
                    else pd.NA,
                    "compressor": None, "decoded_by": "tshark", "note": note,
                })
            if not aligned:
                self.dec.error = self.dec.error or \
                    f"frame {frame}: header fields of {k} messages do not align"
        out = pd.DataFrame(rows, columns=COLUMNS) if rows else empty()
        return _typed(out)

    def _queue_fallback(self, out: pd.DataFrame) -> None:
        need = out[out["note"].notna()]
        if len(need):
            self.dec.fallback += len(need)
            self.dec._need.append(need[["frame", "msg_in_frame", "length", "request_id",
                                        "response_to", "opcode"]].copy())


def _n_strings(types: str) -> int:
    """How many elements of a type list ("0x02\x1f0x10...") tshark shows a
    mongo.element.value.string for."""
    return (types.count("0x02") + types.count("0x0c") + types.count("0x0d")
            + types.count("0x0e") + types.count("0x0f"))      # _STRING_TYPES


def _string_rank(names: list[str], types: str, name: str) -> int | None:
    """Which string value (0, 1...) is that of the first string element called ``name``.
    Types are fixed-width ("0x02" and a separator): element i's is at 5 * i."""
    at = 0
    while True:
        try:
            i = names.index(name, at)
        except ValueError:
            return None
        if types[5 * i:5 * i + 4] == "0x02":
            return _n_strings(types[:5 * i])
        at = i + 1


def _msg_layout(names: str, types: str):
    """What an OP_MSG body's element lists say, apart from the values: (command, how
    many string values, the rank of the collection's string or None, of $db's or None);
    or a note when the lists do not align."""
    nl = names.split(AGG)
    if len(types) != 5 * len(nl) - 1:
        return "element lists do not split cleanly"
    command = nl[0]
    coll = 0 if types.startswith("0x02") else None
    if command == "getMore" and coll is None:
        coll = _string_rank(nl, types, "collection")
    return command, _n_strings(types), coll, _string_rank(nl, types, "$db")


# A benchmark sends the same command shapes over and over: their layouts are cached
# (a request then costs a dict lookup and a split of its string values).
_LAYOUTS: dict = {}


def _name_request(op, kinds, namespace, names, types, strings, malformed, has_flags):
    """(command, database, collection, note) of one request from tshark's element lists;
    a note instead of a name when tshark's fields cannot tell (wire.py will)."""
    if malformed:
        return None, None, None, "tshark marked the frame malformed"
    if op == wire.OP_MSG:
        if not has_flags:
            return None, None, None, "body not dissected (compressed?)"
        if not names or not kinds.startswith("0"):
            return None, None, None, "first section is not the body"
        layout = _LAYOUTS.get((names, types))
        if layout is None:
            if len(_LAYOUTS) > 4096:
                _LAYOUTS.clear()
            layout = _LAYOUTS[(names, types)] = _msg_layout(names, types)
        if isinstance(layout, str):
            return None, None, None, layout
        command, n_strings, coll, db = layout
        if (strings.count(AGG) + 1 if strings else 0) != n_strings:
            return None, None, None, "element lists do not split cleanly"
        if coll is None and db is None:
            return command, None, None, None
        sl = strings.split(AGG)
        return (command, sl[db] if db is not None else None,
                sl[coll] if coll is not None else None, None)
    if op in _LEGACY_COMMAND or op == wire.OP_QUERY:
        db, dot, coll = (namespace or "").partition(".")
        if op != wire.OP_QUERY:
            return _LEGACY_COMMAND[op], db or None, coll if dot else None, None
        if coll != "$cmd":
            return "find", db, coll if dot else None, None
        nl = names.split(AGG) if names else []
        tl = types.split(AGG) if types else []
        if not nl:
            return None, db, None, "empty query document"
        if nl[0] == "$query" and tl[:1] == ["0x03"] and len(nl) > 1:
            nl, tl = nl[1:], tl[1:]
        return nl[0], db, None, None
    if op == wire.OP_REPLY:
        return None, None, None, "OP_REPLY sent to the server port"
    return None, None, None, f"opcode {op} not dissected"


# --- the wire.py fallback ------------------------------------------------------------------


def _frame_set(frames: list[int]) -> str:
    """'frame.number in {1..3, 7}' for a sorted list of frame numbers."""
    out, start, prev = [], None, None
    for f in frames:
        if start is None:
            start = prev = f
        elif f == prev + 1:
            prev = f
        else:
            out.append(f"{start}..{prev}" if prev > start else str(start))
            start = prev = f
    if start is not None:
        out.append(f"{start}..{prev}" if prev > start else str(start))
    return "frame.number in {" + ", ".join(out) + "}"


_FALLBACK_FIELDS = [("frame", "frame.number"), ("reassembled", "tcp.reassembled.data"),
                    ("payload", "tcp.payload")]
_MAX_FILTER = 100_000   # characters of -Y; more frames than that: read all mongo frames


def resolve_fallback(dec: Decode, need: pd.DataFrame | None = None) -> pd.DataFrame:
    """Decode the queued messages with wire.py from their frames' bytes.

    Returns one row per queued message: frame, msg_in_frame, command, database,
    collection, flags, more_to_come, exhaust_allowed, compressed, original_opcode,
    compressor, note (None when decoded).
    """
    if need is None:
        need = pd.concat(dec._need, ignore_index=True) if dec._need else None
    cols = ["frame", "msg_in_frame", "command", "database", "collection", "flags",
            "more_to_come", "exhaust_allowed", "compressed", "original_opcode",
            "compressor", "note"]
    if need is None or need.empty:
        return pd.DataFrame({c: [] for c in cols})
    wanted = sorted(set(need["frame"].tolist()))
    flt = _frame_set(wanted)
    if len(flt) > _MAX_FILTER:
        flt = "mongo"
    by_frame: dict[int, list] = {}
    for r in need.itertuples(index=False):
        by_frame.setdefault(int(r.frame), []).append(r)
    results = []
    ts = _Tshark.over(dec.paths, dec.port, _FALLBACK_FIELDS, flt)
    try:
        for block in ts.blocks(8 << 20):
            for line in block.decode("ascii", "replace").splitlines():
                frame, reassembled, payload = (line.split("\t") + ["", ""])[:3]
                msgs = by_frame.pop(int(frame), None) if frame else None
                if msgs:
                    results += _decode_frame(msgs, reassembled.split(AGG)[0],
                                             payload.split(AGG)[0])
    finally:
        ts.close()
    for msgs in by_frame.values():      # frames the second pass did not return
        results += [_fail(r, "frame bytes not available") for r in msgs]
    out = pd.DataFrame(results, columns=cols)
    return out


def _fail(r, note: str) -> dict:
    return {"frame": int(r.frame), "msg_in_frame": int(r.msg_in_frame), "command": None,
            "database": None, "collection": None, "flags": pd.NA, "more_to_come": False,
            "exhaust_allowed": False, "compressed": int(r.opcode) == wire.OP_COMPRESSED,
            "original_opcode": pd.NA, "compressor": None, "note": note}


def _decode_frame(msgs: list, reassembled_hex: str, payload_hex: str) -> list[dict]:
    try:
        reassembled = bytes.fromhex(reassembled_hex)
        payload = bytes.fromhex(payload_hex)
    except ValueError:
        return [_fail(r, "frame bytes unreadable") for r in msgs]
    out = []
    for r in msgs:
        header = _HEADER.pack(int(r.length), int(r.request_id), int(r.response_to), int(r.opcode))
        data = None
        if reassembled.startswith(header) and len(reassembled) >= r.length:
            data = reassembled[: r.length]
        else:
            at = payload.find(header)
            if at >= 0 and len(payload) - at >= r.length:
                data = payload[at: at + r.length]
        if data is None:
            out.append(_fail(r, "message bytes not found in its frame"))
            continue
        try:
            msg = wire.decode_message(data)
        except wire.WireError as e:
            out.append(_fail(r, f"wire.py: {e}"))
            continue
        out.append({
            "frame": int(r.frame), "msg_in_frame": int(r.msg_in_frame), "command": msg.command,
            "database": msg.database, "collection": msg.collection,
            "flags": msg.flags if msg.opcode == wire.OP_MSG else pd.NA,
            "more_to_come": msg.more_to_come, "exhaust_allowed": msg.exhaust_allowed,
            "compressed": msg.compressed, "original_opcode": msg.original_opcode
            if msg.compressed else pd.NA, "compressor": msg.compressor,
            "note": None if msg.command else (msg.note or "no command name"),
        })
    return out


def apply_fallback(messages: pd.DataFrame, resolved: pd.DataFrame) -> pd.DataFrame:
    """Put wire.py's answers into the message rows they belong to."""
    if resolved.empty:
        return messages
    key = ["frame", "msg_in_frame"]
    res = resolved.set_index(key)
    idx = pd.MultiIndex.from_frame(messages[key])
    hit = idx.isin(res.index)
    r = res.loc[idx[hit]]
    m = messages.copy()
    for c in ("command", "database", "collection", "note", "compressor"):
        m.loc[hit, c] = r[c].to_numpy(dtype=object)
    for c in ("more_to_come", "exhaust_allowed", "compressed"):
        m.loc[hit, c] = r[c].to_numpy(dtype=bool)
    for c in ("flags", "original_opcode"):
        m.loc[hit, c] = pd.array(r[c].to_numpy(dtype=object), dtype="Int64")
    named = hit & m["note"].isna().to_numpy()
    m.loc[named, "decoded_by"] = "wire.py"
    return _typed(m)


# --- entry points ----------------------------------------------------------------------------


def sniff(path: str) -> bool:
    """Is this a capture file (pcap in either byte order or resolution, or pcapng)?"""
    try:
        pcapfile.file_kind(path)
    except (OSError, pcapfile.FormatError):
        return False
    return True


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise PcapError(f"{path}: no such file")
    if not sniff(path):
        raise PcapError(f"{path}: not a pcap or pcapng capture (unknown magic number)")


def _check_files(paths: list[str]) -> None:
    """Each file is a capture, and several can be read as one stream: all pcapng, or
    all pcap of one link type and time resolution (one global header serves them)."""
    for p in paths:
        _check_file(p)
    if len(paths) < 2:
        return
    heads = {}
    for p in paths:
        with open(p, "rb") as fh:
            heads[p] = pcapfile.format_key(fh.read(24))
    if len(set(heads.values())) > 1:
        first = paths[0]
        other = next(p for p in paths if heads[p] != heads[first])
        raise PcapError(f"{other}: not the format of {first} (pcap and pcapng, or pcap "
                        "files of other link types or resolutions, cannot be read as one "
                        "capture; mergecap -w out.pcapng FILES... converts them)")


def detect_port(path: str | list, limit: int = 200_000) -> tuple[int | None, str]:
    """The server port of a capture and why: the destination of most connection
    openings (SYN) in the first ``limit`` frames, else the port common to most TCP
    streams. (None, reason) when there is no TCP at all. (Of a list: its first file.)"""
    path = path if isinstance(path, str) else str(list(path)[0])
    _check_file(path)
    ts = _Tshark(["tshark", "-r", path, "-n", "-c", str(limit), "-Y", "tcp", "-T", "fields",
                  "-e", "tcp.stream", "-e", "tcp.srcport", "-e", "tcp.dstport",
                  "-e", "tcp.flags.syn", "-e", "tcp.flags.ack"])
    syn, streams = Counter(), {}
    try:
        for block in ts.blocks(4 << 20):
            for line in block.decode("ascii", "replace").splitlines():
                p = line.split("\t")
                if len(p) < 5 or not p[0]:
                    continue
                if p[3] in ("1", "True") and p[4] in ("0", "False"):
                    syn[int(p[2])] += 1
                for port in (p[1], p[2]):
                    streams.setdefault(int(port), set()).add(p[0])
    finally:
        ts.close()
    if syn:
        port, n = syn.most_common(1)[0]
        return port, f"destination of {n} connection opening(s)"
    if streams:
        port = max(streams, key=lambda p: (len(streams[p]), p == SERVER_PORT_DEFAULT, -p))
        return port, f"common to {len(streams[port])} TCP stream(s)"
    return None, "no TCP traffic"


def _stream_filter(only: set[int] | None, skip: set[int] | None) -> str:
    flt = DISPLAY_FILTER
    if only is not None:
        flt = f"({flt}) and tcp.stream in {{{', '.join(map(str, sorted(only)))}}}"
    if skip:
        flt = f"({flt}) and not tcp.stream in {{{', '.join(map(str, sorted(skip)))}}}"
    return flt


# Below this a capture is read by one tshark: on two idle cores a 1.8 MB capture took
# 0.53-0.76 s (0.5-0.76 CPU-s) with one against 0.72-0.88 s (1.08 CPU-s) with two; a
# second tshark's start and the split cost more than they save below a few MB.
SPLIT_MIN_BYTES = 8 << 20


def default_workers(paths: list[str]) -> int:
    """2 (split by direction) when two cores and a capture of ``SPLIT_MIN_BYTES`` or
    more that the router can read, else 1. ``MONGOPROBE_PCAP_WORKERS`` (1 or 2) sets
    it, whatever the size."""
    env = os.environ.get("MONGOPROBE_PCAP_WORKERS")
    if env in ("1", "2"):
        return int(env) if env == "1" or pcapfile.can_split(paths) else 1
    size = sum(os.path.getsize(p) for p in paths if os.path.exists(p))
    return 2 if ((os.cpu_count() or 1) >= 2 and size >= SPLIT_MIN_BYTES
                 and pcapfile.can_split(paths)) else 1


def iter_messages(path: str | list, port: int, dec: Decode | None = None,
                  block_bytes: int = 4 << 20, only_streams: set[int] | None = None,
                  skip_streams: set[int] | None = None,
                  workers: int | None = None) -> Iterator[pd.DataFrame]:
    """Message rows, one DataFrame per block of tshark output (about ``block_bytes``).

    ``path``: a capture, or a list of them read as one (a ring buffer's files, in order).
    Requests tshark could not name come with ``note`` set and are queued in ``dec``
    for :func:`resolve_fallback` (``messages`` does both). Never raises on a damaged
    capture: what tshark decoded is yielded and ``dec.problem`` says what went wrong.
    ``only_streams``/``skip_streams``: TCP streams to read or leave out. At the end,
    ``dec.unframed`` lists the stream directions with payload tshark never framed
    (:func:`resync` recovers their messages).

    ``workers=2`` (the default on two cores, from ``SPLIT_MIN_BYTES``): two tshark
    processes, one for the requests and one for the replies (``pcap/pcapfile.py``
    splits the capture), so blocks come in two interleaved orders: each block's
    ``attrs["side"]`` is "request" or "reply", and ``attrs["upto"]`` the capture frame
    its side has been read to (``pcap.Pairer`` waits for the requests before it calls a
    reply unmatched). If the two sides disagree on a stream (``dec.inconsistent``),
    decode again with one.
    """
    dec = dec if dec is not None else Decode(path, int(port))
    _check_files(dec.paths)
    flt = _stream_filter(only_streams, skip_streams)
    workers = default_workers(dec.paths) if workers is None else workers
    if workers >= 2:
        yield from _iter_split(dec, int(port), flt, block_bytes)
        return
    conv = _Blocks(dec)
    ts = _Tshark.over(dec.paths, port, FIELDS, flt)
    for out in _consume([(ts, conv)], block_bytes):
        yield out
    _finish(ts, dec)
    dec.unframed = conv.unframed()


def _consume(runs: list, block_bytes: int) -> Iterator[pd.DataFrame]:
    """Blocks of several tshark runs as they come, each read by its own ``_Blocks``.

    Reader threads keep tshark writing while pandas parses (they use different cores);
    the one queue holds a few blocks, so memory stays bounded, and the consumer takes
    blocks in arrival order, never waiting for one run while another is blocked (the
    split's two sides are fed by one router: waiting on one could stall both)."""
    q: queue.Queue = queue.Queue(maxsize=2 * len(runs))

    def reader(i: int, ts: _Tshark) -> None:
        # a reply's line is a third of a request's (no element lists): blocks of about
        # as many rows keep the DataFrames being parsed, and the sides' skew, alike
        size = block_bytes // 3 if runs[i][1].direction == "reply" else block_bytes
        try:
            for block in ts.blocks(size):
                q.put((i, block))
        except (OSError, ValueError):      # stdout closed under us: the consumer quit
            pass
        finally:
            q.put((i, None))

    threads = [threading.Thread(target=reader, args=(i, ts), daemon=True)
               for i, (ts, _) in enumerate(runs)]
    for t in threads:
        t.start()
    finished, left = False, len(runs)
    try:
        while left:
            i, block = q.get()
            if block is None:
                left -= 1
                continue
            conv = runs[i][1]
            out = conv.read(block)
            if conv.direction:
                out.attrs["side"], out.attrs["upto"] = conv.direction, conv.upto
            yield out
        finished = True
    finally:
        if not finished:                   # the caller stopped early, or an error
            for ts, _ in runs:
                if ts.proc.poll() is None:
                    ts.proc.kill()
            while any(t.is_alive() for t in threads):   # unblock the readers
                try:
                    q.get(timeout=0.1)
                except queue.Empty:
                    pass
            for ts, _ in runs:
                ts.close()
    for t in threads:
        t.join()


def _iter_split(dec: Decode, port: int, flt: str, block_bytes: int) -> Iterator[pd.DataFrame]:
    """The capture split by direction between two tshark processes (``iter_messages``)."""
    dec.workers = 2
    req = _Tshark(tshark_command("-", port, FIELDS, f"({flt}) and tcp.dstport == {port}"),
                  stdin=True)
    rep = _Tshark(tshark_command("-", port, REPLY_FIELDS, f"({flt}) and tcp.srcport == {port}"),
                  stdin=True)
    router = pcapfile.Router(dec.paths, port, [req.proc.stdin, rep.proc.stdin])
    convs = [_Blocks(dec, FIELDS, router.maps[0], "request"),
             _Blocks(dec, REPLY_FIELDS, router.maps[1], "reply")]
    router.start()
    try:
        yield from _consume([(req, convs[0]), (rep, convs[1])], block_bytes)
    finally:
        router.stop()
        router.join(10)
    for ts in (req, rep):
        _finish(ts, dec, router)
    dec.other_ports.update(router.other_ports)
    dec.frames += router.other_frames          # read by one tshark, these would be rows
    dec.unframed = {**convs[0].unframed(), **convs[1].unframed()}
    a, b = convs[0].stream_ports, convs[1].stream_ports
    bad = [k for k in a.keys() & b.keys() if a[k] != b[k]]
    if bad:
        k = min(bad)
        dec.inconsistent = (f"TCP stream {k}: client port {a[k]} in the requests, {b[k]} in "
                            "the replies")


_RESYNC_FIELDS = [("frame", "frame.number"), ("time_epoch", "frame.time_epoch"),
                  ("stream", "tcp.stream"), ("srcport", "tcp.srcport"),
                  ("dstport", "tcp.dstport"), ("payload", "tcp.payload")]


def resync(dec: Decode, directions: dict | None = None) -> pd.DataFrame:
    """Messages of the stream directions tshark could not frame (``dec.unframed``),
    decoded by ``wire_stream.StreamDecoder`` from their raw TCP payload, from the first frame
    tshark left unframed: it skips bytes until a plausible header starts a message that
    decodes (the tail of a message cut by the capture's start, for instance). Rows have
    ``decoded_by`` "wire.py"; ``dec.resynced`` counts them and ``dec.warnings`` says
    what was skipped."""
    import bisect

    directions = dec.unframed if directions is None else directions
    if not directions:
        return empty()
    flt = " or ".join(f"(tcp.stream == {st} and tcp.srcport == {sp} and frame.number >= {f})"
                      for (st, sp), (f, _) in sorted(directions.items()))
    ts = _Tshark.over(dec.paths, dec.port, _RESYNC_FIELDS, f"tcp.len > 0 and ({flt})")
    states: dict = {}
    rows = []
    try:
        for block in ts.blocks(8 << 20):
            for line in block.decode("ascii", "replace").splitlines():
                f = line.split("\t")
                if len(f) < 6 or not f[5]:
                    continue
                frame, stream, sport, dport = int(f[0]), int(f[2]), int(f[3]), int(f[4])
                sec, _, frac = f[1].partition(".")
                t_ns = int(sec) * 1_000_000_000 + int((frac + "000000000")[:9])
                data = bytes.fromhex(f[5].split(AGG)[0])
                st = states.setdefault((stream, sport), {"sd": wire_stream.StreamDecoder(), "fed": 0,
                                                         "starts": [], "times": []})
                st["starts"].append(st["fed"])
                st["times"].append(t_ns)
                msgs = st["sd"].feed(data)
                st["fed"] += len(data)
                end = st["fed"] - st["sd"].pending
                ends = []
                for m in reversed(msgs):
                    ends.append(end)
                    end -= m.length
                request = dport == dec.port
                for k, (m, e) in enumerate(zip(msgs, reversed(ends))):
                    i = bisect.bisect_right(st["starts"], e - m.length) - 1
                    first_ns = st["times"][max(i, 0)]
                    wire_op = wire.OP_COMPRESSED if m.compressed else m.opcode
                    rows.append({
                        "frame": frame, "msg_in_frame": k, "time": t_ns / 1e9,
                        "time_ns": t_ns, "first_time_ns": first_ns, "stream": stream,
                        "client_port": sport if request else dport,
                        "direction": "request" if request else "reply",
                        "length": m.length, "request_id": m.request_id & 0xFFFFFFFF,
                        "response_to": m.response_to & 0xFFFFFFFF, "opcode": wire_op,
                        "flags": m.flags if m.opcode == wire.OP_MSG else pd.NA,
                        "more_to_come": m.more_to_come, "exhaust_allowed": m.exhaust_allowed,
                        "command": m.command if request else None,
                        "database": m.database if request else None,
                        "collection": m.collection if request else None,
                        "compressed": m.compressed,
                        "original_opcode": m.original_opcode if m.compressed else pd.NA,
                        "compressor": m.compressor, "decoded_by": "wire.py",
                        "note": None if m.command or not request else "no command name"})
    finally:
        ts.close()
    skipped = sum(st["sd"].skipped_bytes + st["sd"].close() for st in states.values())
    dec.resynced += len(rows)
    dec.messages += len(rows)
    total = sum(b for _, b in directions.values())
    dec.warnings.append(
        f"{total} bytes in {len(directions)} stream direction(s) were not framed by tshark "
        f"(capture started inside a message?): wire.py recovered {len(rows)} messages, "
        f"skipping {skipped} bytes")
    out = pd.DataFrame(rows, columns=COLUMNS) if rows else empty()
    return _typed(out)


def messages(path: str | list, port: int | None = None, dec: Decode | None = None,
             workers: int | None = None) -> pd.DataFrame:
    """The whole capture as one message table (see the module docstring for columns),
    requests tshark could not name decoded by wire.py. ``port``: the server port
    (detected when None). ``path``: a capture or a list read as one."""
    if port is None:
        port, _ = detect_port(path)
        if port is None:
            port = SERVER_PORT_DEFAULT
    dec = dec if dec is not None else Decode(path, int(port))
    parts = list(iter_messages(path, port, dec, workers=workers))
    if dec.inconsistent:               # the split's sides disagreed: one tshark instead
        dec.reset()
        parts = list(iter_messages(path, port, dec, workers=1))
    if dec.unframed:
        parts.append(resync(dec))
    parts = [p for p in parts if len(p)]
    df = pd.concat(parts, ignore_index=True) if parts else empty()
    df = df.sort_values(["frame", "msg_in_frame"], kind="stable", ignore_index=True)
    if dec._need:
        df = apply_fallback(df, resolve_fallback(dec))
        dec.unnamed = int((df["direction"].eq("request") & df["command"].isna()).sum())
    return df


def parse(path: str, port: int | None = None) -> pd.DataFrame:
    """The parser entry point (``mongoprobe parse pcap FILE``): :func:`messages`."""
    return messages(path, port)
