"""Client-visible latency from packet captures, and its join with the probes' events.

The capture is decoded in bulk by ``pcap/tshark_fields.py`` (one row per message);
this module pairs replies with requests, summarizes latency exactly as ``mongoprobe
latency`` does (same :class:`~mongoprobe.model.latency_summary.LatencySummary`, so ``pcap --json``
has the keys of ``latency --json``), and joins the network-side view with the
server-side one the probes recorded.

Pairing, within each TCP stream (one connection), in capture order:

* a request with ``moreToCome`` expects no reply (counted in ``no_reply``); a reply
  the server sends it anyway (FerretDB answers the Node.js driver's endSessions) is
  ``answered_no_reply``, per command, not unmatched (the last ``NO_REPLY_KEPT`` such
  requests of each stream are kept for it);
* a reply whose previous reply on the stream had ``moreToCome`` and whose
  ``responseTo`` is that reply's ``requestID`` continues an exhaust stream
  (``stream_replies``; not timed again), as the probes count it;
* any other reply is matched to the latest earlier request of the stream with
  ``requestID == responseTo`` not answered yet; none: ``unmatched_replies``;
* requests never answered by the end are ``requests_without_reply``.

Latency is what the client sees on the wire: from the first segment of the request
to the frame that completes the reply (``latency_ns``). On loopback the capture
timestamps a packet as the sender transmits it, so this interval contains the
server's own (from the receive that completed the request to the send of the
reply): it is never less than the probes' latency of the same request.

Memory: :func:`summarize` reads the capture block by block and keeps, besides one
block, the requests awaiting replies (and, when the capture is split between two
tshark processes, the replies that arrived before the other side had read their
requests: the skew between the two, a few MB of capture) and 8 bytes per timed request
per grouping (the exact percentiles); :func:`pairs` and :func:`messages` build whole
tables. Several files (a ring buffer's) are read as one capture.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from mongoprobe.wire import decode as wire, facts as wirefacts
from mongoprobe.model.latency_summary import LatencySummary, from_latencies, unchecked
from . import tshark_fields
from .tshark_fields import Decode

UNKNOWN = "[unknown]"    # a request neither tshark nor wire.py could name

PAIR_COLUMNS = ["stream", "client_port", "request_id", "opcode", "command", "database",
                "collection", "request_frame", "request_msg", "reply_frame", "request_time",
                "reply_time", "latency_ns", "bytes_in", "bytes_out", "more_to_come", "note"]
"""Columns of a pairs table (one row per timed request):

    stream          int64    TCP stream (connection)
    client_port     int64
    request_id      int64
    opcode          str      the request's opcode name on the wire (OP_MSG, OP_COMPRESSED...)
    command         object   command name (None while the wire.py fallback is pending)
    database        object
    collection      object
    request_frame   int64    frame completing the request (with request_msg, its key)
    request_msg     int64    its msg_in_frame
    reply_frame     int64    frame completing the first reply
    request_time    float64  first segment of the request, epoch seconds
    reply_time      float64  frame completing the reply, epoch seconds
    latency_ns      int64    reply time - request first-segment time (client-visible)
    bytes_in        int64    request length
    bytes_out       int64    first reply length
    more_to_come    bool     the reply had moreToCome (an exhaust stream followed)
    note            object   why the request has no name yet (fallback pending)
"""

NO_REPLY_KEPT = 64      # no-reply requests kept per stream, for a reply sent anyway
_REQ = ["rseq", "stream", "client_port", "request_id", "opcode", "command", "database",
        "collection", "frame", "msg_in_frame", "first_time_ns", "length", "note"]


def _seq(m: pd.DataFrame) -> np.ndarray:
    # capture order: frame, then position in the frame
    return m["frame"].to_numpy(np.int64) * 4096 + m["msg_in_frame"].to_numpy(np.int64)


def _objects(df: pd.DataFrame) -> pd.DataFrame:
    """Text columns as plain objects with None for missing (pandas 3 would infer "str")."""
    for c in ("opcode", "command", "database", "collection", "note"):
        col = df[c].astype(object)
        df[c] = col.where(col.notna(), None)
    return df


def _empty_pairs() -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series([], dtype=t) for c, t in zip(PAIR_COLUMNS, [
        "int64", "int64", "int64", object, object, object, object, "int64", "int64", "int64",
        "float64", "float64", "int64", "int64", "int64", bool, object])})


class Pairer:
    """Pairs replies with requests block by block (see the module docstring).

    ``feed(messages)`` returns the pairs completed by that block; ``finish()`` the
    requests still unanswered. ``counts`` and ``unmatched_replies`` accumulate.

    Blocks come in capture order, or (a capture split between two tshark processes)
    as each side delivers them, marked ``attrs["side"]`` with ``attrs["upto"]``, the
    frame that side has been read to. A reply whose request has not been seen is then
    held (``deferred``) until the requests have been read past it: only then is it
    unmatched.
    """

    def __init__(self) -> None:
        self.open = pd.DataFrame({c: [] for c in _REQ})
        self.last: dict[int, tuple[bool, int]] = {}   # stream -> last reply (moreToCome, id)
        self.counts = {"requests": 0, "replies": 0, "stream_replies": 0, "no_reply": 0,
                       "answered_no_reply": 0}
        self.unmatched_replies = 0
        # stream -> {requestID: command} of its latest requests that asked for no reply
        self.no_reply_ids: dict[int, dict[int, str]] = {}
        self.answered_no_reply: Counter = Counter()
        self.requests_by_command: Counter = Counter()
        self.pending_requests: list[pd.DataFrame] = []   # requests awaiting wire.py's name
        self.req_upto = -1              # frame up to which every request has been fed
        self.deferred: pd.DataFrame | None = None   # replies whose request may come

    def feed(self, msgs: pd.DataFrame) -> pd.DataFrame:
        side = msgs.attrs.get("side")
        if side == "request":
            self.req_upto = max(self.req_upto, int(msgs.attrs["upto"]))
        elif side is None and len(msgs):    # both directions, in capture order
            self.req_upto = max(self.req_upto, int(msgs["frame"].max()))
        if msgs.empty:
            return self._match(None)
        msgs = msgs.assign(rseq=_seq(msgs))
        req = msgs[msgs["direction"] == "request"]
        rep = msgs[msgs["direction"] == "reply"]
        self.counts["requests"] += len(req)
        named = req["note"].isna()
        self.requests_by_command.update(req.loc[named, "command"].fillna(UNKNOWN).tolist())
        if (~named).any():
            self.pending_requests.append(req.loc[~named, ["frame", "msg_in_frame",
                                                          "more_to_come"]])
        no_reply = req["more_to_come"].to_numpy(bool)
        self.counts["no_reply"] += int(no_reply.sum())
        for st, rid, cmd in zip(req["stream"][no_reply], req["request_id"][no_reply],
                                req["command"][no_reply]):
            kept = self.no_reply_ids.setdefault(int(st), {})
            kept[int(rid)] = cmd if isinstance(cmd, str) else UNKNOWN
            if len(kept) > NO_REPLY_KEPT:
                del kept[next(iter(kept))]
        req = req[~no_reply].assign(opcode=[wire.opcode_name(int(o)) for o in req["opcode"][~no_reply]])
        cands = pd.concat([self.open, req[_REQ]], ignore_index=True) if len(self.open) \
            else req[_REQ].reset_index(drop=True)
        self.open = cands
        if rep.empty:
            return self._match(None)
        # exhaust streams: the previous reply of the stream had moreToCome and this one
        # answers it
        st = rep["stream"]
        g = rep.groupby("stream", sort=False)
        prev_more = g["more_to_come"].shift(1)
        prev_rid = g["request_id"].shift(1)
        first = prev_more.isna()
        if first.any() and self.last:
            prev_more = prev_more.where(~first, st.map({k: v[0] for k, v in self.last.items()}))
            prev_rid = prev_rid.where(~first, st.map({k: v[1] for k, v in self.last.items()}))
        is_stream = (prev_more.fillna(False).astype(bool)
                     & (prev_rid.astype("float64") == rep["response_to"].astype("float64"))
                     ).to_numpy()
        self.counts["stream_replies"] += int(is_stream.sum())
        tail = rep.groupby("stream", sort=False).tail(1)
        self.last.update({int(s): (bool(m), int(r)) for s, m, r in
                          zip(tail["stream"], tail["more_to_come"], tail["request_id"])})
        firsts = rep[~is_stream]
        left = pd.DataFrame({"rseq": firsts["rseq"].to_numpy(np.int64),
                             "stream": firsts["stream"].to_numpy(np.int64),
                             "request_id": firsts["response_to"].to_numpy(np.int64),
                             "reply_frame": firsts["frame"].to_numpy(np.int64),
                             "reply_ns": firsts["time_ns"].to_numpy(np.int64),
                             "bytes_out": firsts["length"].to_numpy(np.int64),
                             "more_to_come": firsts["more_to_come"].to_numpy(bool)})
        return self._match(left)

    def _match(self, left: pd.DataFrame | None) -> pd.DataFrame:
        """Replies (with the deferred ones) matched to the open requests."""
        if self.deferred is not None and len(self.deferred):
            left = self.deferred if left is None or left.empty else \
                pd.concat([self.deferred, left], ignore_index=True)
            self.deferred = None
        if left is None or left.empty:
            return _empty_pairs()
        cands = self.open
        right = cands.rename(columns={"rseq": "qseq"}).astype(
            {"qseq": "int64", "stream": "int64", "request_id": "int64"}).sort_values("qseq")
        right = right.reset_index(drop=True)
        # only keys through the merge: a reply without a match would turn the request's
        # int64 columns to float64 (nanosecond times rounded); values come from ``right``
        m = pd.merge_asof(left.sort_values("rseq"),
                          right[["qseq", "stream", "request_id"]].assign(
                              qkey=right["qseq"], ridx=np.arange(len(right))),
                          left_on="rseq", right_on="qkey", by=["stream", "request_id"],
                          direction="backward", allow_exact_matches=False)
        hit = m["qseq"].notna()
        dup = hit & m["qseq"].duplicated()       # a second reply to one request
        ok = hit & ~dup
        # a split decode may not have read the request yet: wait for that side (a block
        # in capture order has read every request before its replies)
        wait = ~hit & (m["reply_frame"] > self.req_upto)
        if wait.any():
            self.deferred = m.loc[wait, list(left.columns)].reset_index(drop=True)
        unmatched = m[~ok & ~wait]
        answered = 0
        for st, rid in zip(unmatched["stream"], unmatched["request_id"]):
            cmd = self.no_reply_ids.get(int(st), {}).pop(int(rid), None)
            if cmd is not None:     # the server's answer to a request that asked for none
                self.answered_no_reply[cmd] += 1
                answered += 1
        self.counts["answered_no_reply"] += answered
        self.unmatched_replies += len(unmatched) - answered
        self.counts["replies"] += int(ok.sum())
        used = set(m.loc[ok, "qseq"].astype("int64").tolist())
        self.open = cands[~cands["rseq"].astype("int64").isin(used)].reset_index(drop=True)
        p = m[ok]
        q = right.iloc[p["ridx"].astype("int64").to_numpy()]
        first_ns = q["first_time_ns"].astype("int64").to_numpy()
        out = pd.DataFrame({
            "stream": p["stream"].to_numpy(np.int64),
            "client_port": q["client_port"].astype("int64").to_numpy(),
            "request_id": p["request_id"].to_numpy(np.int64),
            "opcode": q["opcode"].to_numpy(object),
            "command": q["command"].to_numpy(object),
            "database": q["database"].to_numpy(object),
            "collection": q["collection"].to_numpy(object),
            "request_frame": q["frame"].astype("int64").to_numpy(),
            "request_msg": q["msg_in_frame"].astype("int64").to_numpy(),
            "reply_frame": p["reply_frame"].to_numpy(np.int64),
            "request_time": first_ns / 1e9,
            "reply_time": p["reply_ns"].to_numpy(np.int64) / 1e9,
            "latency_ns": p["reply_ns"].to_numpy(np.int64) - first_ns,
            "bytes_in": q["length"].astype("int64").to_numpy(),
            "bytes_out": p["bytes_out"].to_numpy(np.int64),
            "more_to_come": p["more_to_come"].to_numpy(bool),
            "note": q["note"].to_numpy(object),
        })[PAIR_COLUMNS].reset_index(drop=True)
        return _objects(out)

    def finish(self) -> pd.DataFrame:
        """Requests never answered (``requests_without_reply``); replies still waiting
        for a request are unmatched now (every request has been fed)."""
        if self.deferred is not None and len(self.deferred):
            self.req_upto = np.iinfo(np.int64).max
            self._match(None)
        return self.open


# --- summaries ------------------------------------------------------------------------------


class _Events:
    """Timed pairs kept as the columns of a latency events table (``latencies``):
    the capture's latency goes the one path every source goes,
    ``Latencies.from_events`` then ``latency.from_latencies``. A connection (``fd``)
    is a TCP stream."""

    def __init__(self) -> None:
        self.parts: list[pd.DataFrame] = []
        self.ports: dict[int, int] = {}        # stream -> client port

    def add(self, p: pd.DataFrame, commands) -> None:
        if not len(p):
            return
        self.parts.append(pd.DataFrame({
            "time": p["reply_time"].to_numpy(dtype=float),
            "latency_ns": p["latency_ns"].to_numpy(np.int64),
            "command": np.asarray(commands, dtype=object),
            "opcode": p["opcode"].to_numpy(dtype=object),
            "fd": p["stream"].to_numpy(np.int64)}))
        self.ports.update(zip(p["stream"].astype(int), p["client_port"].astype(int)))

    def into(self, s: "CaptureSummary") -> "CaptureSummary":
        from mongoprobe.model.latencies import Latencies

        ev = (pd.concat(self.parts, ignore_index=True) if self.parts else
              pd.DataFrame({"time": pd.Series(dtype=float),
                            "latency_ns": pd.Series(dtype=np.int64),
                            "command": pd.Series(dtype=object),
                            "opcode": pd.Series(dtype=object),
                            "fd": pd.Series(dtype=np.int64)}))
        # (a capture's replies are not checked for ok: 0 yet: failures unknown)
        return unchecked(from_latencies(
            Latencies.from_events(ev), engine="tshark", summary=s,
            conn_label=lambda fd: conn_key([fd], [self.ports[int(fd)]])[0]))


def conn_key(stream, client_port) -> list[str]:
    """by_conn keys: "stream, client_port" (as latency's are "pid, fd")."""
    return [f"{int(s)}, {int(p)}" for s, p in zip(stream, client_port)]


class CaptureSummary(LatencySummary):
    """A capture's latency: :class:`~mongoprobe.model.latency_summary.LatencySummary`'s data, JSON and
    rendering, in the capture's words: a connection is a TCP stream (keys "stream,
    client_port"), and the loss line counts what a capture loses (``malformed``: frames
    tshark marks malformed and requests no decoder could name; ``dropped``: frames after
    a gap in the capture, segments it never saw), worded to fit 80 columns."""

    def label(self, by: str, key: str) -> str:
        if by == "conn":
            stream, _, port = key.partition(", ")
            return f"stream {stream} (client port {port})"
        return super().label(by, key)

    def loss_lines(self) -> str:
        c, lost = self.counts, self.lost
        answered = (wirefacts.answered_line(c["answered_no_reply"], self.answered_no_reply)
                    + "\n" if c.get("answered_no_reply") else "")
        return (f"requests: {c['requests']}  replies: {c['replies']}  "
                f"stream replies: {c['stream_replies']}  "
                f"no-reply (moreToCome): {c['no_reply']}\n{answered}"
                f"lost: unmatched replies {lost['unmatched_replies']}, requests without "
                f"reply {lost['requests_without_reply']}, malformed {lost['malformed']}, "
                f"dropped {lost['dropped']}")


@dataclass
class PcapResult:
    """A summarized capture: the latency summary (``latency --json`` shape), the decode's
    counters, and the pairer's."""

    summary: CaptureSummary
    decode: Decode
    outstanding: pd.DataFrame = field(default_factory=pd.DataFrame)

    def to_json(self) -> dict:
        d = self.summary.to_json()
        dec = self.decode
        d["pcap"] = {"file": dec.path, "port": dec.port, "frames": dec.frames,
                     "messages": dec.messages, "lost_segments": dec.lost_segments,
                     "retransmitted": dec.retransmitted,
                     "malformed_frames": dec.malformed_frames,
                     "decoded_by_wire_py": dec.fallback - dec.unnamed,
                     "unnamed_requests": dec.unnamed, "resynced": dec.resynced,
                     # multi-segment messages whose first segment lay before the
                     # decoder's window: timed at the segment that completed them
                     "timed_at_last_segment": dec.first_segment_unknown,
                     "warnings": list(dec.warnings), "problem": dec.problem}
        return d


def _lost(dec: Decode, pairer: Pairer, outstanding: int) -> dict[str, int]:
    return {"unmatched_replies": pairer.unmatched_replies,
            "requests_without_reply": outstanding,
            # frames tshark marks malformed, plus requests no decoder could name
            "malformed": dec.malformed_frames + dec.unnamed,
            # frames after a gap in the capture (segments the capture missed)
            "dropped": dec.lost_segments}


class _Summary:
    """Pairs and accumulates message blocks; ``finish`` resolves wire.py's names."""

    def __init__(self) -> None:
        self.pairer = Pairer()
        self.events = _Events()
        self.pending: list[pd.DataFrame] = []    # pairs whose request awaits wire.py

    def feed(self, chunk: pd.DataFrame) -> None:
        pairs = self.pairer.feed(chunk)
        ready = pairs["note"].isna().to_numpy()
        self._add(pairs[ready], pairs[ready]["command"].fillna(UNKNOWN))
        if (~ready).any():
            self.pending.append(pairs[~ready])

    def _add(self, p: pd.DataFrame, commands) -> None:
        self.events.add(p, commands)

    def finish(self, dec: Decode) -> PcapResult:
        pairer, outstanding = self.pairer, self.pairer.finish()
        if dec._need:
            resolved = tshark_fields.resolve_fallback(dec)
            names = {(int(f), int(i)): (c, mtc) for f, i, c, mtc in
                     zip(resolved["frame"], resolved["msg_in_frame"], resolved["command"],
                         resolved["more_to_come"])}
            dec.unnamed = 0
            for req in pairer.pending_requests:
                for f, i in zip(req["frame"], req["msg_in_frame"]):
                    c, _ = names.get((int(f), int(i)), (None, False))
                    pairer.requests_by_command[c or UNKNOWN] += 1
                    dec.unnamed += c is None
            if self.pending:
                p = pd.concat(self.pending, ignore_index=True)
                self._add(p, [names.get((int(f), int(i)), (None, False))[0] or UNKNOWN
                              for f, i in zip(p["request_frame"], p["request_msg"])])
            # a request only wire.py could read may turn out to expect no reply
            if len(outstanding):
                mtc = np.array([names.get((int(f), int(i)), (None, False))[1] for f, i in
                                zip(outstanding["frame"], outstanding["msg_in_frame"])],
                               dtype=bool)
                pairer.counts["no_reply"] += int(mtc.sum())
                outstanding = outstanding[~mtc]
        s = self.events.into(CaptureSummary())
        s.requests_by_command = dict(sorted(pairer.requests_by_command.items()))
        s.counts = dict(pairer.counts)
        s.answered_no_reply = dict(pairer.answered_no_reply)
        s.lost = _lost(dec, pairer, len(outstanding))
        return PcapResult(s, dec, outstanding)


def summarize(path: str | list, port: int | None = None, dec: Decode | None = None,
              workers: int | None = None) -> PcapResult:
    """Latency per command, opcode and connection of a whole capture, streamed.

    ``path``: a capture, or a list of captures read as one (a ring buffer's files, in
    order: a request in one file and its reply in the next are paired). ``workers``:
    tshark processes (``tshark_fields.iter_messages``; default 2 on two cores).

    When tshark loses the framing of some stream directions (``dec.unframed``: a capture
    that starts inside a message), the capture is read again: every other stream as
    before, then those streams with their lost directions recovered by wire.py
    (``tshark_fields.resync``). Twice the time, only then.
    """
    if port is None:
        port, _ = tshark_fields.detect_port(path)
        port = port or tshark_fields.SERVER_PORT_DEFAULT
    dec = dec if dec is not None else Decode(path, int(port))
    acc = _Summary()
    for chunk in tshark_fields.iter_messages(path, port, dec, workers=workers):
        acc.feed(chunk)
    if dec.inconsistent:               # the split's sides disagreed: one tshark instead
        dec.reset()
        acc, workers = _Summary(), 1
        for chunk in tshark_fields.iter_messages(path, port, dec, workers=1):
            acc.feed(chunk)
    if not dec.unframed:
        return acc.finish(dec)
    affected = {stream for stream, _ in dec.unframed}
    unframed, first = dict(dec.unframed), dec
    dec = Decode(path, int(port))
    acc = _Summary()
    for chunk in tshark_fields.iter_messages(path, port, dec, skip_streams=affected,
                                             workers=workers):
        acc.feed(chunk)
    part = Decode(path, int(port))
    parts = list(tshark_fields.iter_messages(path, port, part, only_streams=affected,
                                             workers=workers))
    parts.append(tshark_fields.resync(part, unframed))
    m = pd.concat([p for p in parts if len(p)] or [tshark_fields.empty()], ignore_index=True)
    acc.feed(m.sort_values(["frame", "msg_in_frame"], kind="stable", ignore_index=True))
    for k in ("frames", "messages", "lost_segments", "retransmitted", "malformed_frames",
              "port_frames", "first_segment_unknown", "fallback", "resynced"):
        setattr(dec, k, getattr(dec, k) + getattr(part, k))
    dec._need += part._need
    dec.warnings += part.warnings
    dec.unframed = unframed
    dec.cut_short, dec.error = first.cut_short, first.error
    return acc.finish(dec)


def messages(path: str, port: int | None = None, dec: Decode | None = None) -> pd.DataFrame:
    """The capture's message table (``pcap/tshark_fields.py`` documents the columns)."""
    return tshark_fields.messages(path, port, dec)


def pairs(msgs: pd.DataFrame, pairer: Pairer | None = None) -> pd.DataFrame:
    """Timed request/reply pairs of a message table (``PAIR_COLUMNS``)."""
    pairer = pairer if pairer is not None else Pairer()
    out = pairer.feed(msgs)
    return out


def summary_from_pairs(p: pd.DataFrame, pairer: Pairer | None = None,
                       dec: Decode | None = None) -> CaptureSummary:
    """The latency summary of a pairs table (counts and losses from the pairer/decode)."""
    ev = _Events()
    ev.add(p, p["command"].fillna(UNKNOWN))
    s = ev.into(CaptureSummary())
    if pairer is not None:
        s.requests_by_command = dict(sorted(pairer.requests_by_command.items()))
        s.counts = dict(pairer.counts)
        if dec is not None:
            s.lost = _lost(dec, pairer, len(pairer.open))
    else:
        s.counts["requests"] = s.counts["replies"] = len(p)
    return s


# --- the joined view ----------------------------------------------------------------------

JOIN_COLUMNS = ["matched", "stream", "client_port", "network_ns", "server_ns", "transport_ns",
                "request_time", "reply_time", "clock_offset_s"]


def join_with_probe(pcap: pd.DataFrame, events: pd.DataFrame, tolerance_s: float = 0.05
                    ) -> pd.DataFrame:
    """Per request, the network-side latency (capture) beside the server-side one (probe).

    ``pcap``: a pairs table (:func:`pairs`) or a message table (paired here);
    ``events``: the probes' per-request events (``formats/wire_events.py``: time at the
    server's reply, pid, fd, request_id, command, latency_ns...).

    The capture knows TCP streams and ports, the probe pids and file descriptors, and
    neither knows the other's, so requests are matched by what both see:

    1. candidates: capture pairs with the event's ``request_id`` and ``command`` whose
       window [request first segment - tol, reply + tol] holds the event's time (the
       server's reply, which the capture must bracket);
    2. the probe's clock is offset from the capture's by the median of
       ``event.time - reply_time`` over events with exactly one candidate;
    3. each (pid, fd) votes, with its events that have one candidate, for the TCP
       stream(s) it is: among several candidates an event takes the stream its
       (pid, fd) voted for most, then the nearest time (after the offset); fds that a
       closed connection left to a new one vote for each stream in its own time;
    4. one capture pair per event and one event per pair, best first.

    Returns the events with, per row: ``matched``, ``stream``, ``client_port``,
    ``network_ns`` (capture latency), ``server_ns`` (probe latency), ``transport_ns``
    (their difference: transport and queueing outside the server's syscalls),
    ``request_time``, ``reply_time`` and the ``clock_offset_s`` used.
    ``attrs["pcap_unmatched"]`` counts capture pairs no event took.
    """
    p = pcap if "latency_ns" in pcap.columns and "reply_time" in pcap.columns else pairs(pcap)
    p = p.reset_index(drop=True).assign(pidx=np.arange(len(p)))
    e = events.reset_index(drop=True).assign(eidx=np.arange(len(events)))
    c = e[["eidx", "time", "pid", "fd", "request_id", "command"]].merge(
        p[["pidx", "request_id", "command", "stream", "request_time", "reply_time"]],
        on=["request_id", "command"])
    c = c[(c["time"] >= c["request_time"] - tolerance_s) & (c["time"] <= c["reply_time"] + tolerance_s)]
    d = c["time"] - c["reply_time"]
    ncand = c.groupby("eidx")["pidx"].transform("size")
    unique = c[ncand == 1]
    offset = float(np.median(d[ncand == 1])) if len(unique) else 0.0
    votes = unique.groupby(["pid", "fd", "stream"]).size().rename("votes").reset_index()
    c = c.merge(votes, on=["pid", "fd", "stream"], how="left").fillna({"votes": 0})
    c["score"] = (c["time"] - c["reply_time"] - offset).abs()
    c = c.sort_values(["votes", "score"], ascending=[False, True], kind="stable")
    chosen = []
    used_e: set[int] = set()
    used_p: set[int] = set()
    for ei, pi in zip(c["eidx"].tolist(), c["pidx"].tolist()):   # greedy, best first
        if ei not in used_e and pi not in used_p:
            used_e.add(ei)
            used_p.add(pi)
            chosen.append((ei, pi))
    ch = pd.DataFrame(chosen, columns=["eidx", "pidx"]).astype("int64")
    ch = ch.merge(p[["pidx", "stream", "client_port", "latency_ns", "request_time",
                     "reply_time"]], on="pidx")
    out = e.merge(ch, on="eidx", how="left", suffixes=("", "_pcap"))
    out["matched"] = out["pidx"].notna()
    out["network_ns"] = out["latency_ns_pcap"].astype("Int64")
    out["server_ns"] = out["latency_ns"].astype("int64")
    out["transport_ns"] = out["network_ns"] - out["server_ns"]
    out["stream"] = out["stream"].astype("Int64")
    out["client_port"] = out["client_port"].astype("Int64")
    out["clock_offset_s"] = offset
    out = out.drop(columns=["eidx", "pidx", "latency_ns_pcap"])
    out.attrs["pcap_unmatched"] = int(len(p) - len(used_p))
    return out


# --- per-packet exploration ----------------------------------------------------------------


def explore(path: str, port: int, n: int = 20, display_filter: str = "mongo") -> list:
    """The first ``n`` packets of the capture matching ``display_filter`` as pyshark
    packets (``pkt.mongo.opcode``, ``pkt.mongo.get_field("element_name")``...), for a
    notebook. One Python object per packet through tshark's PDML: slow (see
    bench/pcap_decode.py), for looking at a few packets, never for a whole capture."""
    import asyncio
    import concurrent.futures

    import pyshark

    def read() -> list:
        # pyshark drives tshark from an asyncio loop of its own; in a notebook a loop
        # is already running in this thread, so read from a fresh thread and loop.
        loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        cap = pyshark.FileCapture(path, decode_as={f"tcp.port=={int(port)}": "mongo"},
                                  display_filter=display_filter, keep_packets=False)
        out = []
        try:
            for pkt in cap:
                out.append(pkt)
                if len(out) >= n:
                    break
        finally:
            cap.close()
            del cap
            import gc
            gc.collect()                        # let tshark's transports close on this loop
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()
        return out

    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(read).result()
