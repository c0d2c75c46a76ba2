"""The capture split (pcap/pcapfile.py) and what depends on it: two tshark processes,
one per direction, must give exactly the message table and summary of one tshark.

Reads the real captures of samples/pcap/ (needs tshark only) and altered copies of them:
converted to pcap by editcap, with a packet repeated (a retransmission) or removed (a
segment the capture missed), cut into files (a ring buffer).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mongoprobe import pcap
from mongoprobe.pcap import pcapfile, tshark_fields

TOP = Path(__file__).resolve().parents[1]
SAMPLES = TOP / "samples" / "pcap"
NAMES = ["ferretdb-mixedload", "wire-scenarios", "compressed", "midstream", "truncated"]


@pytest.fixture(autouse=True)
def need_tshark() -> None:
    if shutil.which("tshark") is None:
        pytest.skip("tshark is not installed (Debian: apt-get install tshark; "
                    "scripts/setup.sh does it)")


def port_of(name: str) -> int:
    return json.loads((SAMPLES / f"{name}.json").read_text())["port"]


def path_of(name: str) -> str:
    return str(SAMPLES / f"{name}.pcapng")



@functools.cache
def _reference(name: str) -> dict:
    return pcap.summarize(path_of(name), port_of(name)).to_json()


def reference(name: str) -> dict:
    """``pcap.summarize(...).to_json()`` of the unaltered sample, the same for every test
    that compares an altered copy with it: decoded once (a copy each)."""
    return copy.deepcopy(_reference(name))

# --- pcapng blocks, to alter real captures ----------------------------------------------------


def blocks(path: str) -> list[bytes]:
    data = Path(path).read_bytes()
    return [data[off:off + n] for off, _, n, _ in pcapfile.iter_blocks(data)]


def packet_blocks(bl: list[bytes]) -> list[int]:
    return [i for i, b in enumerate(bl) if struct.unpack_from("<I", b)[0] == 6]


def write(path: Path, bl: list[bytes]) -> str:
    path.write_bytes(b"".join(bl))
    return str(path)


def tcp_of(block: bytes) -> tuple[int, int, int]:
    """(source port, destination port, payload bytes) of an Ethernet/IPv4 EPB."""
    caplen = struct.unpack_from("<I", block, 20)[0]
    d = block[28:28 + caplen]
    ihl = (d[14] & 15) * 4
    total = struct.unpack_from(">H", d, 16)[0]
    t = 14 + ihl
    sport, dport = struct.unpack_from(">HH", d, t)
    return sport, dport, total - ihl - (d[t + 12] >> 4) * 4


def decode_both(path, port: int):
    one = tshark_fields.Decode(path, port)
    m1 = tshark_fields.messages(path, port, one, workers=1)
    two = tshark_fields.Decode(path, port)
    m2 = tshark_fields.messages(path, port, two, workers=2)
    return (m1, one), (m2, two)


# --- two tshark processes = one ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_split_equals_one_tshark(name):
    """Same message table, same summary and counters, on every sample."""
    path, port = path_of(name), port_of(name)
    assert pcapfile.can_split([path])
    (m1, d1), (m2, d2) = decode_both(path, port)
    assert d2.workers == 2 and d1.workers == 1 and d2.inconsistent is None
    pd.testing.assert_frame_equal(m1, m2)
    s1 = pcap.summarize(path, port, workers=1).to_json()
    s2 = pcap.summarize(path, port, workers=2).to_json()
    assert s1 == s2
    for k in ("messages", "frames", "port_frames", "lost_segments", "malformed_frames",
              "fallback", "resynced", "cut_short", "first_segment_unknown"):
        assert getattr(d1, k) == getattr(d2, k), k


def test_router_counts_and_routes():
    """Every packet is counted once in the capture's numbering; the two sides together
    hold every packet with payload on the port; the frame maps give original numbers."""
    path, port = path_of("ferretdb-mixedload"), port_of("ferretdb-mixedload")
    outs = [open("/dev/null", "wb") for _ in range(2)]
    r = pcapfile.Router([path], port, outs).start()
    r.join(60)
    bl = blocks(path)
    pk = packet_blocks(bl)
    assert r.frames == len(pk) and r.error is None and not r.cut_short
    req = set(r.maps[0].lookup(np.arange(1, r.maps[0].count + 1)).tolist())
    rep = set(r.maps[1].lookup(np.arange(1, r.maps[1].count + 1)).tolist())
    for n, i in enumerate(pk, start=1):
        sport, dport, payload = tcp_of(bl[i]) if bl[i][28 + 12 + 12:28 + 12 + 14] else (0, 0, 0)
        if payload > 0 and dport == port:
            assert n in req, n
        if payload > 0 and sport == port:
            assert n in rep, n


def test_pcap_format_equals_pcapng(tmp_path):
    """The same capture as nanosecond pcap (editcap): the same messages and times."""
    name = "ferretdb-mixedload"
    out = tmp_path / "x.pcap"
    subprocess.run(["editcap", "-F", "nsecpcap", path_of(name), str(out)], check=True,
                   capture_output=True)
    assert pcapfile.file_kind(str(out)) == "pcap"
    port = port_of(name)
    (m1, _), (m2, d2) = decode_both(str(out), port)
    pd.testing.assert_frame_equal(m1, m2)
    ref = tshark_fields.messages(path_of(name), port, workers=2)
    pd.testing.assert_frame_equal(ref, m2)
    assert d2.workers == 2


def _sent_twice(out, name: str, bl: list, i: int) -> list:
    """Sample ``name`` (its blocks ``bl``) with packet block ``i`` sent twice, written to
    ``out``: decoded on one worker and on two, each one retransmitted frame and the same
    requests, counts and losses as the sample; the summaries."""
    port = port_of(name)
    altered = write(out, bl[:i + 1] + [bl[i]] + bl[i + 1:])
    ref = reference(name)
    summaries = []
    for workers in (1, 2):
        r = pcap.summarize(altered, port, workers=workers)
        j = r.to_json()
        assert r.decode.retransmitted == 1
        assert j["requests_by_command"] == ref["requests_by_command"]
        assert j["lost"] == ref["lost"] and j["counts"] == ref["counts"]
        summaries.append(r)
    return summaries


def test_retransmission_is_not_a_second_request(tmp_path):
    """A request packet sent twice (as TCP retransmits it) is one request, and the
    decode says a frame was retransmitted."""
    name = "ferretdb-mixedload"
    path, port = path_of(name), port_of(name)
    bl = blocks(path)
    pk = packet_blocks(bl)
    i = next(i for i in pk[10:] if tcp_of(bl[i])[1] == port and tcp_of(bl[i])[2] > 0)
    _sent_twice(tmp_path / "retrans.pcapng", name, bl, i)


def test_missing_segment_is_counted(tmp_path):
    """A reply packet the capture missed: a gap in that direction's sequence numbers,
    counted as dropped; its request has no reply; everything else still pairs."""
    name = "ferretdb-mixedload"
    path, port = path_of(name), port_of(name)
    bl = blocks(path)
    pk = packet_blocks(bl)
    i = next(i for i in pk[20:] if tcp_of(bl[i])[0] == port and tcp_of(bl[i])[2] > 0)
    altered = write(tmp_path / "gap.pcapng", bl[:i] + bl[i + 1:])
    ref = reference(name)
    for workers in (1, 2):
        j = pcap.summarize(altered, port, workers=workers).to_json()
        assert j["lost"]["dropped"] == 1
        assert j["lost"]["requests_without_reply"] == 1
        assert j["counts"]["replies"] == ref["counts"]["replies"] - 1


def test_files_read_as_one_capture(tmp_path):
    """A capture cut into three files (as a ring buffer writes them, each with its own
    section header) decodes as the whole file: same pairs, nothing unmatched, frame
    numbers across the files."""
    name = "ferretdb-mixedload"
    path, port = path_of(name), port_of(name)
    bl = blocks(path)
    pk = packet_blocks(bl)
    head = bl[:pk[0]]
    cuts = [pk[0], pk[len(pk) // 3], pk[2 * len(pk) // 3], len(bl)]
    files = [write(tmp_path / f"ring_{k + 1:05d}_20261122120000.pcapng",
                   head + bl[cuts[k]:cuts[k + 1]]) for k in range(3)]
    whole = pcap.messages(path, port)
    for workers in (1, 2):
        m = tshark_fields.messages(files, port, workers=workers)
        pd.testing.assert_frame_equal(whole, m)
    ref = reference(name)
    got = pcap.summarize(files, port).to_json()
    ref.pop("pcap"), got.pop("pcap")
    assert got == ref
    # the CLI: files in ring order whatever order they are given in
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "pcap", files[2], files[0],
                        files[1], "--port", str(port), "--json"], capture_output=True,
                       text=True, cwd=TOP, timeout=300)
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    cli.pop("pcap")
    assert cli == ref


def test_ring_order():
    from mongoprobe.pcap.capture import ring_order
    names = ["r_100000_20261122120000.pcapng", "r_99999_20261122115959.pcapng"]
    assert ring_order(names) == names[::-1]
    assert ring_order(["b.pcapng", "a.pcapng"]) == ["b.pcapng", "a.pcapng"]


def test_pairer_waits_for_the_request_side():
    """Replies delivered before their requests (the reply side's tshark ran ahead) are
    paired when the requests come, not counted unmatched."""
    name = "ferretdb-mixedload"
    m = pcap.messages(path_of(name), port_of(name))
    whole = pcap.pairs(m)
    req, rep = m[m["direction"] == "request"], m[m["direction"] == "reply"]
    pr = pcap.Pairer()
    parts = []
    hr, hq = len(rep) * 2 // 3, len(req) // 3
    for block, side in ((rep.iloc[:hr], "reply"), (req.iloc[:hq], "request"),
                        (rep.iloc[hr:], "reply"), (req.iloc[hq:], "request")):
        b = block.copy()
        b.attrs["side"] = side
        b.attrs["upto"] = int(block["frame"].max())
        parts.append(pr.feed(b))
        assert pr.unmatched_replies == 0
    assert pr.deferred is None or len(pr.deferred) == 0
    assert len(pr.finish()) == 0 and pr.unmatched_replies == 0
    got = pd.concat(parts, ignore_index=True)
    key = ["stream", "request_id", "request_frame"]
    pd.testing.assert_frame_equal(whole.sort_values(key).reset_index(drop=True),
                                  got.sort_values(key).reset_index(drop=True))


def test_a_small_capture_is_read_by_one_tshark(monkeypatch):
    """Two tshark processes from SPLIT_MIN_BYTES on (two cores): below, a second start
    and the split cost more than they save. MONGOPROBE_PCAP_WORKERS sets it."""
    path = path_of(NAMES[0])
    assert pcapfile.can_split([path]) and os.path.getsize(path) < tshark_fields.SPLIT_MIN_BYTES
    monkeypatch.delenv("MONGOPROBE_PCAP_WORKERS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert tshark_fields.default_workers([path]) == 1
    monkeypatch.setattr(tshark_fields, "SPLIT_MIN_BYTES", os.path.getsize(path))
    assert tshark_fields.default_workers([path]) == 2
    monkeypatch.setattr(tshark_fields, "SPLIT_MIN_BYTES", 8 << 20)
    monkeypatch.setenv("MONGOPROBE_PCAP_WORKERS", "2")
    assert tshark_fields.default_workers([path]) == 2


def test_unsupported_link_type_uses_one_tshark(tmp_path):
    """A link type the router does not parse: one tshark reads the file, as before."""
    name = "ferretdb-mixedload"
    bl = blocks(path_of(name))
    idb = next(i for i, b in enumerate(bl) if struct.unpack_from("<I", b)[0] == 1)
    b = bytearray(bl[idb])
    struct.pack_into("<H", b, 8, 147)            # LINKTYPE_USER0
    altered = write(tmp_path / "user0.pcapng", bl[:idb] + [bytes(b)] + bl[idb + 1:])
    assert not pcapfile.can_split([altered])
    assert tshark_fields.default_workers([altered]) == 1


def test_damaged_block_keeps_what_decoded(tmp_path):
    """A pcapng block whose length is garbage, half-way: one clear line and the
    messages before it, never a traceback, with one tshark or two."""
    name = "ferretdb-mixedload"
    path, port = path_of(name), port_of(name)
    bl = blocks(path)
    pk = packet_blocks(bl)
    i = pk[len(pk) // 2]
    b = bytearray(bl[i])
    struct.pack_into("<I", b, 4, 6)                # a block length no block can have
    altered = write(tmp_path / "damaged.pcapng", bl[:i] + [bytes(b)] + bl[i + 1:])
    for workers in (1, 2):
        dec = tshark_fields.Decode(altered, port)
        m = tshark_fields.messages(altered, port, dec, workers=workers)
        assert 0 < len(m) < len(pcap.messages(path, port))
        assert dec.problem and "damaged or corrupt" in dec.problem, dec.problem
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "pcap", altered, "--port",
                        str(port)], capture_output=True, text=True, cwd=TOP, timeout=300)
    assert r.returncode == 0 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(f"mongoprobe: {altered}: capture "
                                                         "damaged or corrupt after frame ")


def test_mixed_formats_are_refused(tmp_path):
    name = "ferretdb-mixedload"
    out = tmp_path / "x.pcap"
    subprocess.run(["editcap", "-F", "pcap", path_of(name), str(out)], check=True,
                   capture_output=True)
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "pcap", path_of(name), str(out),
                        "--port", str(port_of(name))], capture_output=True, text=True,
                       cwd=TOP, timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (f"mongoprobe: {out}: not the format of {path_of(name)} (pcap "
                                "and pcapng, or pcap files of other link types or "
                                "resolutions, cannot be read as one capture; mergecap -w "
                                "out.pcapng FILES... converts them)")


def test_sides_that_disagree_are_decoded_again_by_one_tshark(monkeypatch):
    """If the two sides ever numbered a stream differently (the router sends both the
    packets that open and close connections so that they do not), the decode is redone
    with one tshark rather than pairing across the wrong connections."""
    name = "ferretdb-mixedload"
    path, port = path_of(name), port_of(name)
    ref = pcap.summarize(path, port, workers=1).to_json()
    real = tshark_fields._Blocks.messages

    def skewed(self, df):
        out = real(self, df)
        if self.direction == "reply":             # as if the reply side's streams were off
            self.stream_ports = {k: v + 1 for k, v in self.stream_ports.items()}
        return out

    monkeypatch.setattr(tshark_fields._Blocks, "messages", skewed)
    r = pcap.summarize(path, port)
    assert r.decode.workers == 1 and r.decode.inconsistent is None
    assert r.to_json() == ref
    dec = tshark_fields.Decode(path, port)
    m = tshark_fields.messages(path, port, dec)
    assert dec.workers == 1
    pd.testing.assert_frame_equal(m, tshark_fields.messages(path, port, workers=1))


def test_other_ports_counted_alike(tmp_path):
    """Traffic of other ports beside the server's (a capture without a port filter):
    not decoded, counted the same way by one tshark and by the split."""
    a, b = "ferretdb-mixedload", "http-metrics"
    bl_a, bl_b = blocks(path_of(a)), blocks(path_of(b))
    head = bl_a[:packet_blocks(bl_a)[0]]
    both = write(tmp_path / "both.pcapng", head + [bl_a[i] for i in packet_blocks(bl_a)]
                 + [bl_b[i] for i in packet_blocks(bl_b)])
    port = port_of(a)
    (m1, d1), (m2, d2) = decode_both(both, port)
    pd.testing.assert_frame_equal(m1, m2)
    assert d1.other_ports == d2.other_ports and sum(d1.other_ports.values()) > 0
    assert d1.frames == d2.frames and d1.port_frames == d2.port_frames


def test_retransmitted_tail_of_a_long_message_is_not_malformed(tmp_path):
    """A retransmission of a segment inside a message that spans segments (seen on
    loopback under load: a 200 KB insert's last 3.6 KB sent twice): tshark, which does
    no sequence analysis here, dissects the repeated bytes as a message and marks the
    frame malformed; the decode drops it as retransmitted, and counts no malformed
    frame."""
    name = "wire-scenarios"
    path, port = path_of(name), port_of(name)
    bl = blocks(path)
    pk = packet_blocks(bl)
    m = pcap.messages(path, port)
    big = m[(m["length"] > 100_000) & (m["direction"] == "request")].iloc[0]
    # the segment that completed the 100 KB request (its frame), sent twice
    i = pk[int(big["frame"]) - 1]
    assert tcp_of(bl[i])[1] == port and tcp_of(bl[i])[2] > 0
    for r in _sent_twice(tmp_path / "retrans-tail.pcapng", name, bl, i):
        assert r.decode.malformed_frames == 0
