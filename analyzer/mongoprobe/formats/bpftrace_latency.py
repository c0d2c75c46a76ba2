"""``bpftrace -f json probes/mongo_latency.bt PID [FLAGS [EVENTS_EVERY]]`` output:
per-second latency slices (``formats/wire_slices.Slice``), sampled events, counters.

What the probe prints, one JSON object per line (bpftrace's JSON mode)::

    {"type": "printf", "data": "# clock monotonic_ns=N elapsed_ns=N\\n"}
    {"type": "printf", "data": "@slice 7661\\n"}            a second is over; its maps:
    {"type": "map",   "data": {"@lat_hist1": {"W0,W1,W2,OP,BUCKET": P, ...}}}
                   histogram: P = (the latencies' sum << 20) + their count (PACK);
                   "0,0,7661,-1,0" is the mark of the second the print is for, and
                   "0,0,7658,-1,0" one of a second whose print was cut at SIGINT
                   before this map's clear (its counts are still in it: they come off
                   this print once); @noreply_cmd1 and @failed1 have marks alike
                   (W2 the second, OP -1), @conn_hist1 "-1,SECOND"
    {"type": "map",   "data": {"@lat_max1": {"CPU,W0,W1,W2,OP": MAX_NS}}}
    {"type": "map",   "data": {"@noreply_cmd1": {"W0,W1,W2,OP": N}}}  requests, no reply due
    {"type": "map",   "data": {"@failed1": {"W0,W1,W2,OP,CODE": N}}}  failed replies (ok: 0)
    {"type": "map",   "data": {"@conn_hist1": {"FD,BUCKET": P}}}, @conn_max1 {"CPU,FD": MAX}
                                                                 (FLAGS bit 1)
    {"type": "map",   "data": {"@zbody1": {"TS,TID": "BYTES"}}}  an OP_COMPRESSED request's
                                 first 40 body bytes (bpftrace's buf: \\xNN escapes)
    {"type": "map",   "data": {"@events1": {"TS,TID": [LAT, FD, REQID, OP, W0, W1, W2, IN,
                                 OUT, MTC, ERR]}}}     the second's events (EVENTS_EVERY)
    {"type": "map",   "data": {"@no_reply": N}}  ... the counters, cumulative
    {"type": "map",   "data": {"@answered_no_reply": {"W0,W1,W2": N}}}  replies the
                      server sent anyway to requests that asked for none (moreToCome),
                      per command, cumulative (not unmatched replies)
    {"type": "map",   "data": {"@full_slots": N}}, @full_conns   what full maps refused
    {"type": "map",   "data": {"@conn": {"FD": [REM, POS, HEAD, TAIL, TXR, FLAGS]}}}
                                      at the end: the connections still open
    {"type": "printf", "data": "@end\\n"}                      the last slices were printed
    {"type": "printf", "data": "@tie KEY FD\\n"}   mongo_latency_tls.bt: the connection
                        keyed KEY (2^30 + a number: OpenSSL on memory BIOs) is socket FD

A command's count in a slice is its histogram's total. A bucket's value packs its
count (the low ``PACK_BITS`` bits) and the sum of its latencies modulo 2^(64 -
PACK_BITS) ns: the exact sum is the one value in [count * lo, count * lo + 2^44) with
those bits (``unpack``), exact while count * (hi - lo) < 2^44 (for latencies under
2^36 ns, 16,384 requests a bucket a second; the last bucket, 2^36 ns and up, is open).
Outputs of earlier versions of the probe read the same: with the short map names
(``@p``, ``@q``, ``@n``, ``@x``, ``@pc``, ``@qc``, ``@e``, ``@z``, ``@c``, ``@full_s``,
``@full_c``: ``OLD_KINDS``, ``OLD_NAMES``), and before them ``@h`` counts with ``@s``
(sum, max) tuples keyed by CPU, or ``stats()`` without it, ``@m`` the max, a
``@requests`` counter.

The suffix (0, 1, 2) is the slice modulo 3 (the probe rotates three map sets); a map
with no entries is not printed. A command name is three little-endian words
(``wire_slices.name_of_words``). ``@events_kept`` counts the events the probe stored;
those that are not printed were lost to a full map (counted as dropped).
``full`` names the maps that filled (bpftrace 0.17 gives every map the same
BPFTRACE_MAP_KEYS_MAX keys): ``@slot_cmd`` and ``@conn``, request slots and connections
the probe's maps refused (the requests so lost are already unmatched replies and requests
without reply).

The counters map to ``latency --json``'s: ``replies`` is the count of timed requests
over every slice read. The probe counts requests without a per-request counter: each
connection's head counts its requests due a reply, added to ``@closed_requests`` when
it closes and printed with ``@conn`` at the end, where head - tail are the requests
still waiting (they count as requests without reply). So ``requests`` is exact at ``@end``
(before, it is the requests answered, due no reply or lost so far), and timed requests
that never reached a printed slice show as dropped.
"""

from __future__ import annotations

from typing import Iterable

from mongoprobe.wire import facts as wirefacts
from mongoprobe.run.tracer import probe_module
from . import bpftrace_json
from .errors import FormatError
from .wire_slices import Agg, Slice, events_frame, name_of_words, opcode_name

SLICE_NS = 1_000_000_000
COUNTERS = {"@requests": "requests", "@closed_requests": "closed_requests",
            "@no_reply": "no_reply", "@events_kept": "events_kept",
            "@stream_replies": "stream_replies",
            "@lost_unmatched_replies": "unmatched_replies",
            "@lost_requests_without_reply": "requests_without_reply",
            "@lost_malformed": "malformed", "@lost_dropped": "dropped",
            # syscalls whose messages the probe does not decode (detection only)
            "@untraced_mmsg": "mmsg_calls", "@untraced_io_uring": "io_uring_calls",
            "@untraced_tls": "tls_connections",
            # mongo_latency_tls.bt: TLS connections whose plaintext was decoded (no
            # longer in @untraced_tls), calls that returned plaintext, and those
            # with no known socket (not decoded)
            "@tls_conns": "tls_decoded", "@tls_calls": "tls_calls",
            "@tls_nofd": "tls_calls_without_socket",
            # of the decoded: keyed by their SSL * (memory BIOs), and of those, tied
            # to their socket
            "@tls_bio": "tls_memory_bio", "@tls_tied": "tls_memory_bio_tied"}
# bit 31 of an fd marks a TLS connection's plaintext state (mongo_latency_tls.bt)
FD_MASK = 0x7FFFFFFF
# with it, bit 30: a connection keyed by its SSL * (memory BIOs), shown by its socket's
# fd once a "@tie KEY FD" line named it, else as 2^30 + its number (as bcc does)
SSL_KEY = 0x40000000
FULL = {"@full_slots": "@slot_cmd", "@full_conns": "@conn"}
# the probe's maps by their names before they were spelt out (recordings made then):
# a per-second map's name without its suffix, and the whole names
OLD_KINDS = {"p": "lat_hist", "q": "lat_max", "n": "noreply_cmd", "x": "failed",
             "pc": "conn_hist", "qc": "conn_max", "e": "events", "z": "zbody"}
OLD_NAMES = {"@c": "@conn", "@full_s": "@full_slots", "@full_c": "@full_conns"}
# a histogram bucket's value: (sum of latencies << PACK_BITS) + count, as the probe
# adds it up (mongo_wire.bt.in, ACCOUNT)
PACK_BITS = 20
# per-second maps whose values add up (a stale second's counts come off them: _net)
SUMMED = ("lat_hist", "noreply_cmd", "failed", "conn_hist")
# s a second's counted maps are kept for that: a print is cut only at SIGINT, and the
# set's next print is END's or the exit's, seconds later
KEEP_PRINTED_S = 10
_SUM_MOD = 1 << (64 - PACK_BITS)


def unpack(bucket: int, value: int) -> tuple[int, int]:
    """A bucket's packed value: (count, exact sum of its latencies). bpftrace prints
    the 64-bit sum signed; the sum's bits are its value modulo 2^44, and the bucket's
    bounds say which value it is."""
    v = value & ((1 << 64) - 1)
    n = v & ((1 << PACK_BITS) - 1)
    lo = n * wirefacts.bounds(bucket)[0]
    return n, lo + (((v >> PACK_BITS) - lo) % _SUM_MOD)


def _marks(kind: str, value: dict) -> tuple[dict, list[int]]:
    """A summed map's print without its mark keys, and the seconds they name (the
    probe's PRINT_SLICE: opcode -1 with the second as W2; @conn_hist: fd -1)."""
    if kind == "conn_hist":
        marks = {k: _ints(k)[1] for k in value if k.startswith("-1,")}
    else:
        marks = {k: w[2] for k in value if k.startswith("0,0,")
                 for w in (_ints(k),) if w[3] == -1}
    if not marks:
        return value, []
    return {k: v for k, v in value.items() if k not in marks}, list(marks.values())


def _ints(key: str) -> list[int]:
    return [int(k) for k in key.split(",")]


class BpftraceLatency:
    """The probe's output fed line by line (live or from a file): ``feed`` returns the
    slices a line completes; ``events`` collects the event lines as tuples;
    ``counts``/``lost`` are the counters so far (final after ``close``)."""

    def __init__(self, source: str = "mongo_latency.bt") -> None:
        self.source = source
        self.lineno = 0
        self.clock_ns: int | None = None     # CLOCK_MONOTONIC when the probe began
        self.raw: dict[str, int] = dict.fromkeys(COUNTERS.values(), 0)
        self.replies = 0
        self.lost_events = 0                 # bpftrace's own perf-buffer losses
        self.helper_errors = 0               # bpftrace 0.23+: a helper failed (its warning)
        self.events: list[tuple] = []
        self.full: dict[str, int] = dict.fromkeys(FULL.values(), 0)
        self.ended = False
        self.old_counter = False             # an earlier probe's @requests counter
        self.open_heads = 0                  # at @end: requests due on open connections
        self.open_waiting = 0                # ... and still waiting
        self._cur: Slice | None = None
        self._printed: set[int] = set()      # seconds whose @slice line was read
        self._late: dict[int, Slice] = {}    # map set -> its maps printed at exit
        self._late_prints: list[tuple] = []  # (set, name, kind, value) printed at exit
        # the second being printed (a tick's or END's): its number, the maps it printed
        self._cur_sec: int | None = None
        self._batch_maps: set[str] = set()
        self._net_printed: dict[tuple[str, int], dict | set] = {}  # (map, second) ->
        # what its print counted (events: their keys)
        self._names: dict[str, tuple[str, str]] = {}   # "W0,W1,W2,OP" -> (command, op)
        self._zbody: dict[str, bytes] = {}   # "TS,TID" -> a compressed request's bytes
        self.ties: dict[int, int] = {}       # memory-BIO key -> its socket's fd
        # {command: replies} to requests that asked for none, cumulative (its last print)
        self.answered_no_reply: dict[str, int] = {}
        self._handlers = {"printf": self._printf, "map": self._map, "stats": self._map,
                          "lost_events": self._lost_events,
                          "helper_error": self._helper_error}

    # --- feeding --------------------------------------------------------------------

    def feed(self, line: str) -> list[Slice]:
        """One line of the output; the slices it completes."""
        self.lineno += 1
        if not line.lstrip().startswith("{"):
            return []
        return list(bpftrace_json.read([line], self.source, self._handlers,
                                       first_lineno=self.lineno))

    def _lost_events(self, count: int, rec) -> None:
        self.lost_events += count

    def _helper_error(self, data, rec) -> None:
        # bpftrace 0.23 reports a failed helper (a map full, say) as a record of its
        # own: not data, counted
        self.helper_errors += 1

    def close(self) -> list[Slice]:
        """The slice being read, if any (a probe cut before ``@end``), and those
        printed at exit."""
        done = self._finish()
        for view, name, kind, value in self._late_prints:
            value = self._net(name, kind, value)
            cur = self._late_slice(view) if value else None
            if cur is not None:     # (None: printed already)
                self._apply(cur, kind, value)
        self._late_prints = []
        for view in sorted(self._late):
            self._cur = self._late[view]
            done += self._finish()      # (None: nothing)
        self._late = {}
        return sorted(done, key=lambda s: s.start_ns)

    def _printf(self, text: str, rec=None) -> list[Slice]:
        if text.startswith("@slice "):
            done = self._finish()
            sec = int(text.split()[1])
            self._printed.add(sec)
            self._cur, self._cur_sec = Slice(sec * SLICE_NS, SLICE_NS), sec
            self._batch_maps = set()
            for key in [k for k in self._net_printed if k[1] < sec - KEEP_PRINTED_S]:
                del self._net_printed[key]
            return done
        if text.startswith("@end"):
            done = self._finish()
            self.ended = True
            return done
        if text.startswith("@tie "):
            # said right after the connection's first reply, so before the second
            # holding its events is printed (a key's number comes back only after
            # 2^22 connections on one CPU: the latest tie holds)
            key, fd = text.split()[1:3]
            self.ties[int(key)] = int(fd)
            return []
        if text.startswith("# clock "):
            fields = dict(kv.split("=") for kv in text.split()[2:])
            self.clock_ns = int(fields["monotonic_ns"])
        return []

    def _map(self, name: str, value, rec) -> None:
        name = OLD_NAMES.get(name, name)
        if name in COUNTERS:
            self.raw[COUNTERS[name]] = int(value)
            self.old_counter |= name == "@requests"
            return
        if name == "@answered_no_reply":
            # (W0,W1,W2) -> replies, cumulative: printed whole each second, so a
            # command's count is its largest print (one at exit may come after END's
            # clear)
            answered: dict[str, int] = {}
            for key, v in value.items():
                cmd = name_of_words(*_ints(key))
                answered[cmd] = answered.get(cmd, 0) + int(v)
            for cmd, n in answered.items():
                self.answered_no_reply[cmd] = max(self.answered_no_reply.get(cmd, 0), n)
            return
        if name == "@conn":
            for v in value.values():
                head, tail, flags = int(v[2]), int(v[3]), int(v[5])
                if flags & 1:
                    self.open_heads += head
                    self.open_waiting += max(head - tail, 0)
            return
        if name in FULL:
            self.full[FULL[name]] = int(value)
            return
        kind, view = name[1:-1], name[-1]
        if not view.isdigit():
            return
        kind = OLD_KINDS.get(kind, kind)
        view = int(view)
        if self._cur is not None and view == self._cur_sec % 3 and name not in self._batch_maps:
            self._batch_maps.add(name)
            value = self._net(name, kind, value, self._cur_sec)
            if kind in SUMMED:
                self._net_printed[name, self._cur_sec] = value
            elif kind == "events":
                self._net_printed[name, self._cur_sec] = set(value)   # (their keys)
            self._apply(self._cur, kind, value)
        elif self._cur is not None or self.ended:
            # bpftrace's print of every map at its exit (after @end, or after a print
            # cut short: another set's maps, or one printed again): read at the end,
            # into the second its set was not printed for, if any
            self._late_prints.append((view, name, kind, value))
        elif kind in ("events", "zbody"):
            self._apply(None, kind, value)

    def _net(self, name: str, kind: str, value: dict, sec: int | None = None) -> dict:
        """A print of a map (second ``sec``'s; None: the exit's) without its marks,
        less what the prints of the earlier seconds its marks name counted: their clear
        of it never ran (bpftrace dropped it at SIGINT), so the map still holds their
        counts. Summed values less theirs (a bucket's packed count and sum alike);
        events already read left out; a maximum stays (it cannot be taken apart)."""
        if kind == "events":
            seen = [v for (n, _), v in self._net_printed.items() if n == name]
            return {k: v for k, v in value.items() if not any(k in s for s in seen)}
        if kind not in SUMMED:
            return value
        value, marked = _marks(kind, value)
        for old in marked:
            before = self._net_printed.get((name, old)) if old != sec else None
            if not before:
                continue        # (this second's, or one whose print was cut before it)
            low = (1 << PACK_BITS) - 1 if kind in ("lat_hist", "conn_hist") else -1
            value = {k: int(v) - int(before.get(k, 0)) for k, v in value.items()
                     if (int(v) & low) != (int(before.get(k, 0)) & low)}
        return value

    def _apply(self, cur: Slice | None, kind: str, value: dict) -> None:
        """One per-second map's entries into ``cur`` (events and compressed bodies
        into the run's: ``cur`` may be None for them)."""
        if kind == "events":
            self._events(value)
            return
        if kind == "zbody":
            self._zbody.update((k, _buf_bytes(v)) for k, v in value.items())
            return
        if kind in ("lat_hist", "lat_max", "h", "s", "m", "noreply_cmd", "failed"):
            self._command_map(cur, kind, value)
            return
        for key, v in value.items():
            k = _ints(key)
            cpu_first = kind == "conn_max" or (kind == "sc" and isinstance(v, list))
            fd = self.conn_fd(k[1] if cpu_first else k[0])
            agg = cur.conn_rows.get(fd)
            if agg is None:
                agg = cur.conn_rows[fd] = Agg()
            if kind == "conn_hist":
                _add_packed(agg, k[-1], v)
            elif kind == "conn_max":
                agg.max_ns = max(agg.max_ns, int(v))
            elif kind == "hc":
                agg.hist[k[-1]] = agg.hist.get(k[-1], 0) + int(v)
            elif kind == "sc":
                _add_sum_max(agg, v)
            elif kind == "mc":
                agg.max_ns = max(agg.max_ns, int(v))

    def _late_slice(self, view: int) -> Slice | None:
        """The slice of a map set bpftrace printed at its exit, after ``@end``, or
        None. print() and clear() are async: bpftrace 0.17 can lose an interval's
        at exit (bpftrace issues #2646, #3924), leaving a second that was never
        printed in its maps (a gap in the printed seconds: that second); or run a
        clear after its exit print, printing again a second already read (no gap:
        not counted twice)."""
        if view not in self._late:
            first = min(self._printed, default=0)
            last = max(self._printed, default=-1)
            sec = next((x for x in range(first, last)
                        if x % 3 == view and x not in self._printed), None)
            self._late[view] = None if sec is None else Slice(sec * SLICE_NS, SLICE_NS)
        return self._late[view]

    def _command_map(self, cur: Slice, kind: str, value: dict) -> None:
        """One of the slice's per-command maps (@lat_hist, @lat_max, @noreply_cmd,
        @failed; earlier probes' @h, @s, @m): keys are ``W0,W1,W2,OP`` (and ``,BUCKET``
        for @lat_hist and @h, ``,CODE`` for @failed: failed replies; the CPU first for
        @lat_max and a tuple-valued @s). An hour at
        50k requests/s prints millions of these entries: names are decoded once per
        key prefix."""
        rows, names = cur.rows, self._names
        for key, v in value.items():
            if kind in ("lat_hist", "h", "failed"):
                key, _, b = key.rpartition(",")
            elif kind == "lat_max" or (kind == "s" and isinstance(v, list)):
                key = key.partition(",")[2]          # the CPU first
            name = names.get(key)
            if name is None:
                w0, w1, w2, op = _ints(key)
                name = names[key] = (name_of_words(w0, w1, w2), opcode_name(op))
            agg = rows.get(name)
            if agg is None:
                agg = rows[name] = Agg()
            if kind == "lat_hist":
                _add_packed(agg, int(b), v)
            elif kind == "lat_max":
                agg.max_ns = max(agg.max_ns, int(v))
            elif kind == "h":
                b = int(b)
                agg.hist[b] = agg.hist.get(b, 0) + int(v)
            elif kind == "s":
                _add_sum_max(agg, v)
            elif kind == "m":
                agg.max_ns = max(agg.max_ns, int(v))
            elif kind == "failed":
                code = int(b)
                agg.errors += int(v)
                agg.codes[code] = agg.codes.get(code, 0) + int(v)
            else:
                agg.noreply += int(v)

    def _events(self, entries: dict) -> None:
        for key, v in entries.items():
            ts, tid = _ints(key)
            # (an 11th value, the error code, since the probe reads failed replies)
            if len(v) not in (10, 11):
                raise FormatError(self.source, self.lineno, "an event of 11 values", str(v))
            lat, fd, rid, op, w0, w1, w2, bin_, bout, mtc, *err = (int(x) for x in v)
            name = name_of_words(w0, w1, w2)
            body = self._zbody.pop(key, None) if op == 2012 else None
            if body is not None:
                # the command inside, decompressed from the body's first bytes
                # (header bytes are not used: 16 zeros stand for them)
                inside = probe_module("compressednames").compressed_command(
                    bytes(16) + body, 16 + min(len(body), max(bin_ - 16, 0)))
                if inside:
                    name = inside.decode("utf-8", "replace")
            self.events.append((ts, lat, tid, self.conn_fd(fd), rid, opcode_name(op), name, bin_, bout,
                                bool(mtc), err[0] if err else 0))

    def conn_fd(self, key: int) -> int:
        """The fd an event or a per-connection row shows for a state key: the socket's
        (a TLS connection's plaintext key without bit 31; a memory-BIO connection's
        once tied), else 2^30 + the number of an untied memory-BIO connection."""
        key &= FD_MASK
        return self.ties.get(key, key) if key & SSL_KEY else key

    def _finish(self) -> list[Slice]:
        s, self._cur = self._cur, None
        if s is None:
            return []
        # a timed request is counted in its histogram, and only there
        for a in (*s.rows.values(), *s.conn_rows.values()):
            a.count = sum(a.hist.values())
        self.replies += sum(a.count for a in s.rows.values())
        s.counts, s.lost = self.counts, self.lost
        return [s]

    # --- the counters ---------------------------------------------------------------

    @property
    def counts(self) -> dict[str, int]:
        r = self.raw
        return {"requests": self._requests(), "replies": self.replies,
                "stream_replies": r["stream_replies"], "no_reply": r["no_reply"],
                "answered_no_reply": sum(self.answered_no_reply.values())}

    @property
    def untraced(self) -> dict[str, int]:
        """recvmmsg/sendmmsg and io_uring_enter calls of the target (not decoded); TLS
        connections whose plaintext was not decoded, TLS calls with no known socket."""
        return {"mmsg_calls": self.raw["mmsg_calls"],
                "io_uring_calls": self.raw["io_uring_calls"],
                # a memory-BIO connection whose ClientHello came before tracing
                # is decoded without having been seen as TLS: never below 0
                "tls_connections": max(0, self.raw["tls_connections"]),
                "tls_calls_without_socket": self.raw["tls_calls_without_socket"]}

    @property
    def tls(self) -> dict[str, int]:
        """What mongo_latency_tls.bt's hooks decoded: connections, calls with plaintext,
        and of the connections those keyed by their SSL * (memory BIOs) and those of
        them tied to their socket (zeros from mongo_latency.bt)."""
        return {"connections": self.raw["tls_decoded"], "calls": self.raw["tls_calls"],
                "memory_bio": self.raw["tls_memory_bio"],
                "memory_bio_tied": self.raw["tls_memory_bio_tied"]}

    @property
    def lost(self) -> dict[str, int]:
        return self.lost_given(len(self.events))

    def lost_given(self, events_seen: int) -> dict[str, int]:
        """The loss counters, the events read being ``events_seen`` (they may have
        been read elsewhere: a recorded run keeps them in Parquet)."""
        r = self.raw
        waiting = unprinted = 0
        if self.ended:
            # due a reply, not lost, not waiting: timed, so in a slice, unless
            # the slice never got printed
            answered = (self._requests() - r["no_reply"] - r["requests_without_reply"]
                        - self._waiting())
            waiting = self._waiting()
            unprinted = max(answered - self.replies, 0) if not self.old_counter else 0
        # events the probe kept that its maps could not hold
        lost_events = max(r["events_kept"] - events_seen, 0) if self.ended else 0
        return {"unmatched_replies": r["unmatched_replies"],
                "requests_without_reply": r["requests_without_reply"] + waiting,
                "malformed": r["malformed"],
                "dropped": r["dropped"] + self.lost_events + lost_events + unprinted}

    def _requests(self) -> int:
        r = self.raw
        if self.old_counter:
            return r["requests"]
        if self.ended:
            return r["closed_requests"] + self.open_heads + r["no_reply"]
        return self.replies + r["no_reply"] + r["requests_without_reply"]

    def _waiting(self) -> int:
        r = self.raw
        if self.old_counter:
            return max(r["requests"] - self.replies - r["no_reply"]
                       - r["requests_without_reply"], 0)
        return self.open_waiting


def _buf_bytes(text: str | list) -> bytes:
    """bpftrace's printing of a buf(): printable bytes as themselves, others \\xNN;
    bpftrace 0.27 prints it as a JSON array of the byte values."""
    if isinstance(text, list):
        return bytes(text)
    out, i = bytearray(), 0
    while i < len(text):
        if text.startswith("\\x", i) and len(text) >= i + 4:
            try:
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            except ValueError:
                pass
        out += text[i].encode("latin-1", "replace")
        i += 1
    return bytes(out)


def _add_packed(agg: Agg, bucket: int, v) -> None:
    """One packed histogram bucket (@lat_hist, @conn_hist): its count and its latencies' sum."""
    n, total = unpack(bucket, int(v))
    agg.hist[bucket] = agg.hist.get(bucket, 0) + n
    agg.sum_ns += total


def _add_sum_max(agg: Agg, v) -> None:
    """One (sum, max) tuple of a CPU, or an earlier probe's stats() value."""
    if isinstance(v, list):
        agg.sum_ns += int(v[0])
        agg.max_ns = max(agg.max_ns, int(v[1]))
    else:
        agg.sum_ns += int(v["total"])


def read_bpftrace_latency(lines: Iterable[str], source: str = "mongo_latency.bt"):
    """A whole output: (slices, events table, final counts, final lost, clock_ns)."""
    r = BpftraceLatency(source)
    slices = [s for line in lines for s in r.feed(line)] + r.close()
    return slices, events_frame(r.events), r.counts, r.lost, r.clock_ns
