"""pcap and pcapng files, record by record: read one or several captures as one stream and
route each packet, unchanged, to the decoder that needs it.

Why: tshark dissects about 60k frames/s here, one core each, whatever fields it is
asked for (``bench/pcap_decode.py``). Two tshark processes, one given the requests
(packets to the server port) and one the replies (packets from it), dissect half the
frames each, in parallel; the reply side is asked only for header fields, so it also
writes a fraction of the text. TCP reassembly is per direction, so nothing a decoder
needs is in the other's half. This module is the split; ``tshark_fields.py`` runs the
decoders and reads their output.

Routing (:class:`Router`), per packet of a TCP connection to or from ``port``:

* to the port (a request direction) -> the request side; from it -> the reply side;
* the first packet seen in each direction of a connection, and every SYN, FIN or RST
  -> both sides, so both tshark processes open and close the same conversations in
  the same order and number TCP streams (``tcp.stream``) exactly as one tshark
  reading the whole file would (the reader checks this: ``tshark_fields`` compares
  the client port each side gives every stream);
* a pure ACK (no payload, no SYN/FIN/RST) -> neither (with sequence analysis off,
  tshark does nothing with it);
* TCP on other ports -> neither, counted per port (``other_ports``: the "wrong --port"
  diagnostic);
* anything not understood here (IP fragments, IPv6 extension headers, other link
  types, truncated headers) -> both sides, so tshark decides; each side keeps only its
  direction.

Frame numbers: tshark numbers the packets of its own input; :class:`FrameMap` maps
those local numbers back to the original capture's (what Wireshark shows), chunk by
chunk, and forgets chunks the reader has passed, so memory does not grow with the
capture.

Several files (a ring buffer) are read one after the other as one capture: a pcapng
file's section header starts a new section in the stream, as ``mergecap -a`` would
concatenate them; frames are numbered across the files. pcap files must share the link
type and time resolution of the first (their global header is written once).

Supported link types: Ethernet (with 802.1Q/802.1ad tags), Linux cooked (SLL, SLL2),
BSD loopback (NULL, LOOP), raw IP. :func:`can_split` says whether a capture can be split.
"""

from __future__ import annotations

import fcntl
import os
import queue
import struct
import threading
from collections import Counter
from typing import BinaryIO

import numpy as np

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": ("<", False), b"\xa1\xb2\xc3\xd4": (">", False),
               b"\x4d\x3c\xb2\xa1": ("<", True), b"\xa1\xb2\x3c\x4d": (">", True)}
PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"
# link types whose packets are parsed here (others go to both sides)
ETHERNET, NULL, RAW, LOOP, RAW12, RAW14, SLL, IPV4, IPV6, SLL2 = \
    1, 0, 101, 108, 12, 14, 113, 228, 229, 276
SUPPORTED = {ETHERNET, NULL, RAW, LOOP, RAW12, RAW14, SLL, IPV4, IPV6, SLL2}

REQUEST, REPLY = 0, 1
_BOTH, _NONE = 2, 3
_SYN_FIN_RST = 0x07
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)     # Linux: a 1 MB pipe per side
_CHUNK = 4 << 20              # bytes read at a time
_PAD = [b"", b"\0", b"\0\0", b"\0\0\0"]


class _Stopped(Exception):
    """Every side's reader went away."""


class FormatError(ValueError):
    """Not a pcap or pcapng file, or one this reader cannot continue."""


def file_kind(path: str) -> str:
    with open(path, "rb") as fh:
        magic = fh.read(4)
    if magic == PCAPNG_MAGIC:
        return "pcapng"
    if magic in PCAP_MAGICS:
        return "pcap"
    raise FormatError(f"{path}: not a pcap or pcapng capture (unknown magic number)")


def format_key(head: bytes) -> bytes:
    """What captures must share to be read as one stream, from a file's first 24 bytes:
    pcapng, or pcap's magic (byte order, resolution) and link type (one global header
    serves them all)."""
    return b"pcapng" if head[:4] == PCAPNG_MAGIC else head[:4] + head[20:24]


def iter_blocks(data: bytes):
    """(offset, type, length, byte order) of each whole pcapng block in ``data``."""
    off, end = 0, "<"
    while off + 12 <= len(data):
        if data[off:off + 4] == PCAPNG_MAGIC:                  # a section: its byte order
            end = "<" if data[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
        btype, blen = struct.unpack_from(end + "II", data, off)
        if blen < 12 or off + blen > len(data):
            return
        yield off, btype, blen, end
        off += blen


def link_types(path: str, limit: int = 1 << 20) -> set[int]:
    """The link types of the interfaces described in the first ``limit`` bytes."""
    with open(path, "rb") as fh:
        data = fh.read(limit)
    if data[:4] in PCAP_MAGICS:
        end, _ = PCAP_MAGICS[data[:4]]
        return {struct.unpack_from(end + "I", data, 20)[0] & 0x0FFFFFFF} if len(data) >= 24 \
            else set()
    return {struct.unpack_from(end + "H", data, off + 8)[0]
            for off, btype, _, end in iter_blocks(data) if btype == 1}


def can_split(paths: list[str]) -> bool:
    """Every file is pcap or pcapng with only link types parsed here (that several
    files share one format is checked by the reader, ``tshark_fields._check_files``)."""
    for p in paths:
        try:
            file_kind(p)
            lts = link_types(p)
        except (OSError, FormatError):
            return False
        if not lts or not lts <= SUPPORTED:
            return False
    return True


# --- frame numbers ------------------------------------------------------------------------


class FrameMap:
    """Local frame numbers (1, 2, ... in the order packets were routed to one side) ->
    original frame numbers. Written by the router thread, read by the decoder's."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._starts: list[int] = []          # local number of each chunk's first frame
        self._chunks: list[np.ndarray] = []
        self.count = 0                        # frames routed so far

    def extend(self, originals: list[int]) -> None:
        if not originals:
            return
        a = np.asarray(originals, dtype=np.int64)
        with self._lock:
            self._starts.append(self.count + 1)
            self._chunks.append(a)
            self.count += len(a)

    def lookup(self, local: np.ndarray) -> np.ndarray:
        local = np.asarray(local, dtype=np.int64)
        with self._lock:
            starts, chunks = list(self._starts), list(self._chunks)
        if not len(local):
            return local.copy()
        if not starts:
            raise KeyError("no frames routed yet")
        flat = np.concatenate(chunks) if len(chunks) > 1 else chunks[0]
        i = local - starts[0]
        if i.min() < 0 or i.max() >= len(flat):
            raise KeyError(f"frames {int(local.min())}..{int(local.max())} not in the map")
        return flat[i]

    def release(self, below: int) -> None:
        """Forget chunks whose frames are all below local number ``below``."""
        with self._lock:
            while len(self._starts) > 1 and self._starts[1] <= below:
                self._starts.pop(0)
                self._chunks.pop(0)


# --- packet parsing -------------------------------------------------------------------------

_U16 = struct.Struct(">H")
_IP4 = struct.Struct(">BxHHH")          # version/ihl, total length, id, flags/fragment
_TCP = struct.Struct(">HHIIBB")         # ports, seq, ack, data offset, flags


def _l3(lt: int, d) -> tuple[int, int] | None:
    """(IP version, offset of the IP header) or None."""
    n = len(d)
    if lt == ETHERNET:
        if n < 14:
            return None
        et, o = _U16.unpack_from(d, 12)[0], 14
        while et in (0x8100, 0x88A8) and n >= o + 4:
            et, o = _U16.unpack_from(d, o + 2)[0], o + 4
    elif lt == SLL:
        if n < 16:
            return None
        et, o = _U16.unpack_from(d, 14)[0], 16
    elif lt == SLL2:
        if n < 20:
            return None
        et, o = _U16.unpack_from(d, 0)[0], 20
    elif lt in (NULL, LOOP):
        o, et = 4, 0
    elif lt in (RAW, RAW12, RAW14, IPV4, IPV6):
        o, et = 0, 0
    else:
        return None
    if et == 0:                                 # the IP version says
        if n <= o:
            return None
        v = d[o] >> 4
        return (v, o) if v in (4, 6) else None
    if et == 0x0800:
        return 4, o
    if et == 0x86DD:
        return 6, o
    return None


# Ethernet, IPv4 without options, TCP: most packets, read with one unpack
_ETH_IP4_TCP = struct.Struct(">12xHBxH2xHxB2x8sHH8xBB")


def classify(lt: int, d, port: int):
    """(sport, dport, tcp flags, payload bytes, connection key, IP header offset) of a
    TCP packet; (None, IP header offset or -1) when it is not a TCP packet this parser
    understands."""
    if lt == ETHERNET and len(d) >= 48:
        et, vihl, total, frag, proto, addrs, sport, dport, off, flags = \
            _ETH_IP4_TCP.unpack_from(d)
        if et == 0x0800 and vihl == 0x45 and proto == 6 and not frag & 0x3FFF:
            payload = (total - 20 if total else len(d) - 34) - (off >> 4) * 4
            key = (addrs, sport, dport) if dport == port else (addrs, dport, sport)
            return sport, dport, flags, payload, key, 14
    l3 = _l3(lt, d)
    if l3 is None:
        return None, -1
    v, o = l3
    n = len(d)
    if v == 4:
        if n < o + 20:
            return None, -1
        vihl, total, _, frag = _IP4.unpack_from(d, o)
        if d[o + 9] != 6 or frag & 0x3FFF:      # not TCP, or a fragment
            return None, o
        ihl = (vihl & 15) * 4
        t = o + ihl
        addrs = bytes(d[o + 12:o + 20])
        ip_payload = (total - ihl) if total else n - t
    else:
        if n < o + 40 or d[o + 6] != 6:         # extension headers: let tshark see them
            return None, (o if n >= o + 40 else -1)
        t = o + 40
        addrs = bytes(d[o + 8:o + 40])
        ip_payload = _U16.unpack_from(d, o + 4)[0] or n - t
    if n < t + 14:
        return None, o
    sport, dport, _, _, off, flags = _TCP.unpack_from(d, t)
    payload = ip_payload - (off >> 4) * 4
    key = (addrs, sport, dport) if dport == port else (addrs, dport, sport)
    return sport, dport, flags, payload, key, o


# --- the router -------------------------------------------------------------------------------


class _Writer(threading.Thread):
    """Writes one side's bytes to its pipe; a bounded queue, so the router runs ahead
    of a slow side by a few chunks at most (and the other side keeps being fed)."""

    def __init__(self, fh: BinaryIO) -> None:
        super().__init__(daemon=True)
        self.fh = fh
        self.q: queue.Queue = queue.Queue(maxsize=4)
        self.error: BaseException | None = None
        try:
            fcntl.fcntl(fh.fileno(), F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass

    def run(self) -> None:
        fd = self.fh.fileno()
        while (data := self.q.get()) is not None:
            if self.error is not None:
                continue                       # the reader went away: drain, drop
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
            except OSError as e:               # tshark exited (damaged file, killed...)
                self.error = e
        try:
            self.fh.close()
        except OSError:
            pass


class Router:
    """Reads ``paths`` as one capture and writes each packet, unchanged, to the request
    side, the reply side, both or neither (module docstring). ``outputs``: one binary
    file per side (tshark's stdin); with one output every packet goes to it (a plain
    concatenation, for several files read by one tshark)."""

    def __init__(self, paths: list[str], port: int, outputs: list[BinaryIO]) -> None:
        self.paths, self.port = list(paths), int(port)
        self.split = len(outputs) == 2
        self.writers = [_Writer(o) for o in outputs]
        self.maps = [FrameMap() for _ in outputs]
        self.frames = 0                       # packets read (the original numbering)
        self.other_ports: Counter = Counter()  # payload frames per port, other connections
        self.other_frames = 0                 # those frames
        self.error: str | None = None         # why reading stopped early (damaged file)
        self.cut_short = False                # the last file ends inside a packet
        self._seen: set = set()
        self._pcap_head: bytes | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "Router":
        for w in self.writers:
            w.start()
        self._thread.start()
        return self

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
        for w in self.writers:
            w.join(timeout)

    def stop(self) -> None:
        """Make the router stop early (the decoder quit): pending writes are dropped."""
        for w in self.writers:
            w.error = w.error or OSError("stopped")

    # one chunk of output per side
    def _emit(self, parts: list[list], originals: list[list]) -> None:
        if all(w.error for w in self.writers):
            raise _Stopped()
        for w, m, p, o in zip(self.writers, self.maps, parts, originals):
            m.extend(o)
            if p:
                w.q.put(b"".join(p))

    def _run(self) -> None:
        try:
            for i, path in enumerate(self.paths):
                if self.error or all(w.error for w in self.writers):
                    break
                with open(path, "rb") as fh:
                    kind = file_kind(path)
                    if kind == "pcap":
                        self._pcap(fh, first=i == 0)
                    else:
                        self._pcapng(fh)
        except _Stopped:
            pass
        except (OSError, FormatError, struct.error) as e:
            self.error = str(e)
        finally:
            for w in self.writers:
                w.q.put(None)

    def _route(self, lt: int, d) -> tuple[int, int]:
        """The side(s) of one packet (REQUEST, REPLY, _BOTH or _NONE) and the offset of
        its IP header (-1: not IP, or not known)."""
        c = classify(lt, d, self.port) if lt in SUPPORTED else (None, -1)
        if c[0] is None:                      # not understood here: tshark decides
            return _BOTH, c[1]
        sport, dport, flags, payload, key, l3 = c
        port = self.port
        if sport != port and dport != port:
            if payload > 0:
                self.other_frames += 1
                self.other_ports[sport] += 1
                self.other_ports[dport] += 1
            return _NONE, l3
        if key not in self._seen:
            self._seen.add(key)
            return _BOTH, l3
        if flags & _SYN_FIN_RST or sport == dport:
            return _BOTH, l3
        if payload <= 0:
            return _NONE, l3
        return (REQUEST if dport == port else REPLY), l3

    def _put(self, side: int, block, parts: list, originals: list) -> None:
        if side == _NONE:
            return
        if side != REPLY:
            parts[0].append(block)
            originals[0].append(self.frames)
        if side != REQUEST and self.split:
            parts[1].append(block)
            originals[1].append(self.frames)

    def _chunks(self, fh: BinaryIO):
        """Reads of the file: (buffer, its memoryview, per-side parts, per-side frame
        numbers) for the caller to fill; it sets ``self._used`` to the bytes it framed,
        the rest is carried to the next read. After each, the parts are written."""
        rest = b""
        n_out = len(self.writers)
        while True:
            data = fh.read(_CHUNK)
            buf = rest + data if rest else data
            parts: list = [[] for _ in range(n_out)]
            originals: list = [[] for _ in range(n_out)]
            self._used = 0
            yield buf, memoryview(buf), parts, originals
            self._emit(parts, originals)
            if self.error:                 # damaged: what came before it is decoded
                return
            rest = bytes(buf[self._used:])
            if not data:
                self.cut_short = self.cut_short or bool(rest)
                return

    def _pcap(self, fh: BinaryIO, first: bool) -> None:
        head = fh.read(24)
        if len(head) < 24 or head[:4] not in PCAP_MAGICS:
            raise FormatError("not a pcap file")
        end, _ = PCAP_MAGICS[head[:4]]
        lt = struct.unpack_from(end + "I", head, 20)[0] & 0x0FFFFFFF
        split = self.split
        strip = split and lt == ETHERNET       # Ethernet headers dropped: tshark reads raw IP
        if first or self._pcap_head is None:
            self._pcap_head = head
            out = head[:20] + struct.pack(end + "I", RAW) if strip else head
            for w in self.writers:
                w.q.put(out)
        elif format_key(head) != format_key(self._pcap_head):
            raise FormatError("pcap files of different link types or resolutions")
        rec = struct.Struct(end + "IIII")
        for buf, mv, parts, originals in self._chunks(fh):
            off, n = 0, len(buf)
            while off + 16 <= n:
                sec, frac, caplen, origlen = rec.unpack_from(buf, off)
                stop = off + 16 + caplen
                if stop > n:
                    break
                self.frames += 1
                if not split:
                    self._put(REQUEST, mv[off:stop], parts, originals)
                else:
                    side, l3 = self._route(lt, mv[off + 16:stop])
                    if not strip:
                        self._put(side, mv[off:stop], parts, originals)
                    elif l3 >= 0 and side != _NONE:            # Ethernet header dropped
                        self._put(side, rec.pack(sec, frac, caplen - l3, max(origlen - l3, 0))
                                  + mv[off + 16 + l3:stop], parts, originals)
                off = stop
            self._used = off

    def _pcapng(self, fh: BinaryIO) -> None:
        end = "<"
        lts: list[int] = []
        n_out = len(self.writers)
        split = self.split
        hdr, u32 = struct.Struct(end + "II"), struct.Struct(end + "I")
        epb, opb = struct.Struct(end + "IIIII"), struct.Struct(end + "HHIIII")
        epb_head = struct.Struct(end + "IIIIIII")
        fast, port, seen = _ETH_IP4_TCP, self.port, self._seen
        for buf, mv, parts, originals in self._chunks(fh):
            off, n = 0, len(buf)
            while off + 12 <= n:
                if buf[off:off + 4] == PCAPNG_MAGIC:           # section header: byte order
                    end = "<" if buf[off + 8:off + 12] == b"\x4d\x3c\x2b\x1a" else ">"
                    hdr, u32 = struct.Struct(end + "II"), struct.Struct(end + "I")
                    epb, opb = struct.Struct(end + "IIIII"), struct.Struct(end + "HHIIII")
                    epb_head = struct.Struct(end + "IIIIIII")
                    lts = []
                btype, blen = hdr.unpack_from(buf, off)
                if blen < 12 or blen % 4:
                    # what was read is still decoded; the rest cannot be framed
                    self.error = f"damaged pcapng block after frame {self.frames}"
                    break
                stop = off + blen
                if stop > n:
                    break
                block = mv[off:stop]
                if btype == 6 or btype == 2 or btype == 3:
                    self.frames += 1
                    if not split:
                        self._put(REQUEST, block, parts, originals)
                        off = stop
                        continue
                    if btype == 6:
                        iface, hi, lo, caplen, origlen = epb.unpack_from(buf, off + 8)
                        dstart = off + 28
                        if caplen >= 48 and iface < len(lts) and lts[iface] == ETHERNET:
                            # the common case, inline: Ethernet, IPv4, TCP, a known
                            # connection, payload in one direction
                            (et, vihl, total, frag, proto, addrs, sport, dport, toff,
                             flags) = fast.unpack_from(buf, dstart)
                            if (et == 0x0800 and vihl == 0x45 and proto == 6
                                    and not frag & 0x3FFF and not flags & _SYN_FIN_RST
                                    and (dport == port) != (sport == port)
                                    and ((addrs, sport, dport) if dport == port
                                         else (addrs, dport, sport)) in seen):
                                if (total - 20 if total else caplen - 34) - (toff >> 4) * 4 > 0:
                                    n_ip = caplen - 14
                                    pad = -n_ip & 3
                                    side = 0 if dport == port else 1
                                    parts[side].append(b"".join((
                                        epb_head.pack(6, 32 + n_ip + pad, iface, hi, lo, n_ip,
                                                      max(origlen - 14, 0)),
                                        mv[dstart + 14:dstart + caplen], _PAD[pad],
                                        u32.pack(32 + n_ip + pad))))
                                    originals[side].append(self.frames)
                                off = stop
                                continue
                    elif btype == 2:                           # obsolete packet block
                        iface, _, hi, lo, caplen, origlen = opb.unpack_from(buf, off + 8)
                        dstart = off + 28
                    else:                                      # simple packet block
                        iface, hi, lo, dstart = 0, 0, 0, off + 12
                        origlen = u32.unpack_from(buf, off + 8)[0]
                        caplen = min(origlen, blen - 16)
                    lt = lts[iface] if iface < len(lts) else -1
                    side, l3 = self._route(lt, mv[dstart:dstart + caplen])
                    if lt != ETHERNET:
                        self._put(side, block, parts, originals)
                    elif l3 >= 0 and side != _NONE:            # as raw IP (see the IDB)
                        n_ip = caplen - l3
                        pad = -n_ip & 3
                        total = 32 + n_ip + pad
                        self._put(side, b"".join((
                            epb_head.pack(6, total, iface, hi, lo, n_ip, max(origlen - l3, 0)),
                            mv[dstart + l3:dstart + caplen], _PAD[pad], u32.pack(total))),
                            parts, originals)
                elif btype == 9:                               # systemd journal: a frame
                    self.frames += 1
                else:
                    if btype == 1:
                        lt = struct.unpack_from(end + "H", buf, off + 8)[0]
                        lts.append(lt)
                        if split and lt == ETHERNET:           # its packets go as raw IP
                            block = b"".join((mv[off:off + 8], struct.pack(end + "H", RAW),
                                              mv[off + 10:stop]))
                    for s in range(n_out):                     # SHB, IDB, NRB, ISB...: all
                        parts[s].append(block)
                off = stop
            self._used = off
