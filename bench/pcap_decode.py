#!/usr/bin/env python3
"""pcap_decode.py - bulk capture decoding vs pyshark, and memory as captures grow.

USAGE: .venv/bin/python bench/pcap_decode.py [--capture FILE --port N] [--rounds N]
                                             [--rate-copies 8] [--copies 1,4,16,33]
                                             [--pyshark-seconds S] [--reps N]

1. A real capture: by default recorded now (root): the embedded FerretDB driven by
   mongoprobe's mixed workload (8 threads, --rounds rounds) through
   mongoprobe.pcap.capture.Capture; or --capture FILE --port N.
2. Rate, in one run, on that capture grown to --rate-copies copies (see 3; about
   240 MB by default, so that start-up is not what is measured): the bulk path
   (pcap/tshark_fields.messages: the capture split by direction between two tshark
   -T fields processes read by pandas, wire.py for what tshark cannot name) decodes
   the whole capture; the same with one tshark (workers=1); pyshark 0.6 (FileCapture,
   decode-as mongo, reading the same header fields and the first element name of each
   message) runs on the same file for --pyshark-seconds (it would need far longer for
   all of it). Messages per second each, and the ratio (goal: >= 100x): bulk and
   pyshark alternate --reps times, and the median of the per-repetition ratios is
   the result (the machine is shared: a slow spell then falls on both). The bulk rate
   on the recorded capture itself (start-up included) is printed too.
3. Memory: captures of increasing size built from the real one: K copies, each with
   its client address rewritten (127.0.K.2: new connections, so TCP streams stay
   distinct) and its times shifted by K x the capture's duration (checksums are not
   checked by tshark). For each size, ``pcap.summarize`` (the ``mongoprobe pcap`` path:
   streamed blocks, exact percentiles) runs in a fresh process; its peak RSS and the
   largest tshark's (two run at once) are reported, and the message count must be K
   times the original's.

Needs tshark and pyshark; recording needs root and the FerretDB built by setup.
The machine has 2 shared cores: read the ratio, measured side by side, not the times.
"""

from __future__ import annotations

import argparse
import json
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyzer"))

from mongoprobe.pcap import pcapfile, tshark_fields  # noqa: E402


def record(tmp: Path, rounds: int) -> tuple[Path, int]:
    from mongoprobe.load import mixed_workload as mixedload
    from mongoprobe.run import target
    from mongoprobe.pcap.capture import Capture

    out = tmp / "base.pcapng"
    state = tmp / "target"
    info = target.start(state, port=target.free_port())
    try:
        with Capture(out, info.port):
            mixedload.run(info.uri, threads=8, rounds=rounds)
    finally:
        target.stop(state)
    return out, info.port


# --- the bulk path and pyshark --------------------------------------------------------------


def bulk_rate(path: Path, port: int, workers: int | None = None) -> tuple[int, float]:
    t0 = time.perf_counter()
    m = tshark_fields.messages(str(path), port, workers=workers)
    return len(m), time.perf_counter() - t0


def tshark_alone(path: Path, port: int) -> float:
    """The bulk path's tshark run with its output thrown away: the floor of any parser
    of tshark's fields."""
    t0 = time.perf_counter()
    subprocess.run(tshark_fields.tshark_command(str(path), port), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t0


def pyshark_rate(path: Path, port: int, seconds: float) -> tuple[int, float]:
    import pyshark

    t0 = time.perf_counter()
    cap = pyshark.FileCapture(str(path), decode_as={f"tcp.port=={port}": "mongo"},
                              display_filter="mongo", keep_packets=False)
    n = 0
    try:
        for pkt in cap:
            for layer in pkt.get_multiple_layers("mongo"):
                # the fields the bulk path gives each message row
                (layer.message_length, layer.request_id, layer.response_to, layer.opcode,
                 layer.get_field("msg_flags"), layer.get_field("element_name"))
                n += 1
            if time.perf_counter() - t0 > seconds:
                break
    finally:
        cap.close()
    return n, time.perf_counter() - t0


# --- bigger captures from the real one --------------------------------------------------------


def grow(base: Path, port: int, copies: int, out: Path) -> None:
    """K copies of a loopback (Ethernet, IPv4) pcapng, client address 127.0.K.2 in copy
    K, times shifted by K x the capture's span: distinct connections, in time order."""
    data = base.read_bytes()
    blocks = [(o, t, n) for o, t, n, _ in pcapfile.iter_blocks(data)]
    head = b"".join(data[o:o + n] for o, t, n in blocks if t != 6)   # SHB, IDB (one iface)
    pkts = [(o, n) for o, t, n in blocks if t == 6]
    ts = [(struct.unpack_from("<I", data, o + 12)[0] << 32) | struct.unpack_from("<I", data, o + 16)[0]
          for o, _ in pkts]
    span = max(ts) - min(ts) + 1_000_000      # in the interface's resolution (ns here)
    with open(out, "wb") as fh:
        fh.write(head)
        for k in range(copies):
            client = bytes([127, (k >> 8) & 255, k & 255, 2]) if k else None
            shift = k * span
            for (o, n), t in zip(pkts, ts):
                b = bytearray(data[o:o + n])
                t2 = t + shift
                struct.pack_into("<II", b, 12, t2 >> 32, t2 & 0xFFFFFFFF)
                if client and b[28 + 12:28 + 14] == b"\x08\x00":   # Ethernet, IPv4
                    ip = 28 + 14
                    ihl = (b[ip] & 15) * 4
                    sport, dport = struct.unpack_from(">HH", b, ip + ihl)
                    if dport == port:
                        b[ip + 12:ip + 16] = client            # from the client
                    elif sport == port:
                        b[ip + 16:ip + 20] = client            # to the client
                fh.write(b)


MEASURE = """
import json, re, resource, sys, time
sys.path.insert(0, {analyzer!r})
from mongoprobe import pcap
t = time.perf_counter()
r = pcap.summarize({path!r}, {port})
dt = time.perf_counter() - t
print(json.dumps({{"messages": r.decode.messages, "requests": r.summary.counts["requests"],
    "lost": r.summary.lost, "seconds": dt, "workers": r.decode.workers,
    # VmHWM, not ru_maxrss: a child spawned by vfork inherits its parent's ru_maxrss
    "python_kb": int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1)),
    "tshark_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}}))
"""


def measure(path: Path, port: int) -> dict:
    code = MEASURE.format(analyzer=str(Path(__file__).resolve().parents[1] / "analyzer"),
                          path=str(path), port=port)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--capture", type=Path, help="a capture to use instead of recording")
    ap.add_argument("--port", type=int, help="its server port")
    ap.add_argument("--rounds", type=int, default=40, help="mixedload rounds when recording")
    ap.add_argument("--rate-copies", type=int, default=8,
                    help="copies of the capture the rates are measured on")
    ap.add_argument("--copies", default="1,4,16,33", help="capture sizes, in copies")
    ap.add_argument("--pyshark-seconds", type=float, default=12.0)
    ap.add_argument("--reps", type=int, default=3, help="bulk/pyshark repetitions")
    ap.add_argument("--keep", type=Path, help="keep the grown captures in this folder")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory(dir=a.keep) as tmpdir:
        tmp = Path(tmpdir)
        if a.capture:
            if not a.port:
                ap.error("--capture needs --port")
            base, port = a.capture, a.port
        else:
            print(f"recording: FerretDB, mixed workload 8 threads x {a.rounds} rounds...",
                  file=sys.stderr, flush=True)
            base, port = record(tmp, a.rounds)
        n_base, t_base = bulk_rate(base, port)
        rated = base
        if a.rate_copies > 1:
            rated = tmp / f"x{a.rate_copies}.pcapng"
            grow(base, port, a.rate_copies, rated)
        size = rated.stat().st_size
        n_one, t_one = bulk_rate(rated, port, workers=1)
        t_floor = tshark_alone(rated, port)
        # bulk and pyshark alternate, so a slow spell of this shared machine falls on
        # both: each repetition's ratio is measured side by side, the median reported
        reps = []
        for _ in range(a.reps):
            n_bulk, t_bulk = bulk_rate(rated, port)
            n_py, t_py = pyshark_rate(rated, port, a.pyshark_seconds)
            reps.append((n_bulk / t_bulk, n_py / t_py))
        if rated != base:
            rated.unlink()
        ratios = sorted(rb / rp for rb, rp in reps)
        r_bulk, r_py = sorted(reps, key=lambda x: x[0] / x[1])[len(reps) // 2]
        med = r_bulk / r_py
        print(f"recorded capture: {base.stat().st_size / 1e6:.1f} MB, {n_base:,} messages, "
              f"TCP port {port}: bulk {n_base / t_base:,.0f} msgs/s (start-up included)")
        print(f"rates on {a.rate_copies} copies: {size / 1e6:.0f} MB, {n_bulk:,} messages")
        for i, (rb, rp) in enumerate(reps, 1):
            print(f"  rep {i}: bulk, 2 tshark (split by direction) {rb:>8,.0f}/s, "
                  f"pyshark 0.6 (FileCapture, PDML) {rp:>6,.0f}/s: {rb / rp:.1f}x")
        print(f"bulk, 1 tshark:                      {n_one:>9,} msgs in {t_one:6.1f} s = "
              f"{n_one / t_one:>8,.0f}/s ({n_one / t_one / r_py:.1f}x pyshark)")
        print(f"(one tshark -T fields pass alone, output discarded: {t_floor:.1f} s = "
              f"{n_bulk / t_floor:,.0f}/s, {n_bulk / t_floor / r_py:.0f}x pyshark)")
        print(f"ratio bulk/pyshark: median {med:.1f}x of {len(ratios)} (range "
              f"{ratios[0]:.1f}-{ratios[-1]:.1f}; goal >= 100x)")
        print()
        print("memory as the capture grows (mongoprobe pcap path: pcap.summarize)")
        print(f"{'copies':>6} {'size MB':>8} {'messages':>10} {'seconds':>8} "
              f"{'msgs/s':>8} {'python MB':>9} {'tshark MB':>9} (each)")
        base_msgs = None
        for k in [int(x) for x in a.copies.split(",")]:
            path = base if k == 1 else tmp / f"x{k}.pcapng"
            if k != 1:
                grow(base, port, k, path)
            r = measure(path, port)
            base_msgs = base_msgs or r["messages"]
            flag = "" if r["messages"] == k * base_msgs else \
                f"   (expected {k * base_msgs:,} messages)"
            print(f"{k:>6} {path.stat().st_size / 1e6:>8.0f} {r['messages']:>10,} "
                  f"{r['seconds']:>8.1f} {r['messages'] / r['seconds']:>8,.0f} "
                  f"{r['python_kb'] / 1024:>9.0f} {r['tshark_kb'] / 1024:>9.0f}{flag}",
                  flush=True)
            if k != 1:
                path.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
