#!/usr/bin/env python3
"""probe_overhead.py - what tracing costs the server, as throughput ratios.

USAGE: .venv/bin/python bench/probe_overhead.py [--reps N] [--threads N] [--rounds N]

Starts the embedded FerretDB and runs the same fixed pymongo load (mongoprobe's
mixed workload) under each mode, alternating modes within every repetition so
machine noise hits them alike:

    none            no probe
    bpftrace-hist   probes/mongo_latency.bt (in-kernel histograms)
    bcc-hist        probes/mongolatency.py (in-kernel histograms)
    bpftrace-events probes/mongo_snoop.bt (one printf per request)
    bcc-events      probes/mongolatency.py --events (ring buffer, one event per request)
    tshark          a tshark capture of the port on loopback

Prints the median throughput of each mode and the median of its per-repetition
ratios to `none` (goal: histogram modes >= 0.97). The server is pinned to CPU 0
and the load to CPU 1. Needs root; the machine has 2 cores, so the load,
server and probe compete: read ratios, never absolute times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analyzer"))

from mongoprobe import mixedload, probes, target  # noqa: E402


class Tshark:
    def __init__(self, port: int, path: str):
        self.proc = subprocess.Popen(["tshark", "-i", "lo", "-f", f"tcp port {port}", "-w", path],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:      # "Capturing on 'Loopback: lo'"
            if "Capturing on" in line:
                return
        raise RuntimeError("tshark did not start")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(60)


def start_mode(mode: str, info, tmp: str):
    if mode == "none":
        return None
    if mode == "bpftrace-hist":
        return probes.bpftrace("mongo_latency.bt", info.pid)
    if mode == "bpftrace-events":
        return probes.bpftrace("mongo_snoop.bt", info.pid)
    if mode == "bcc-hist":
        return probes.bcc("mongolatency.py", "-p", info.pid, "-j")
    if mode == "bcc-events":
        return probes.bcc("mongolatency.py", "-p", info.pid, "-j", "--events",
                          os.path.join(tmp, "events.jsonl"))
    if mode == "tshark":
        return Tshark(info.port, os.path.join(tmp, "cap.pcapng"))
    raise ValueError(mode)


def drain(p) -> None:
    # Keep reading the probe's stdout so a full pipe never stalls it.
    if isinstance(p, probes.Probe):
        import threading
        threading.Thread(target=lambda: [None for _ in p.lines()], daemon=True).start()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=20)
    a = ap.parse_args()
    why = probes.why_cannot_trace()
    if why:
        print(f"probe_overhead: {why}", file=sys.stderr)
        return 1
    modes = ["none", "bpftrace-hist", "bcc-hist", "bpftrace-events", "bcc-events", "tshark"]
    if os.environ.get("MONGOPROBE_BENCH_MODES"):
        modes = os.environ["MONGOPROBE_BENCH_MODES"].split(",")
    if probes.why_cannot_bcc() or not (probes.probes_dir() / "mongolatency.py").exists():
        modes = [m for m in modes if not m.startswith("bcc")]
    if not shutil.which("tshark"):
        modes.remove("tshark")
    rates: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp, target.EmbeddedTarget(Path(tmp) / "t") as info:
        pin(info.pid)
        mixedload.run(info.uri, a.threads, 1, overlap_ids=False)   # warm up
        for rep in range(a.reps):
            # rotate the order so drift over time does not favour one mode
            order = modes[rep % len(modes):] + modes[:rep % len(modes)]
            for mode in order:
                p = start_mode(mode, info, tmp)
                drain(p)
                r = mixedload.run(info.uri, a.threads, a.rounds, overlap_ids=False)
                if p is not None:
                    p.stop()
                rates[mode].append(r.operations / r.seconds)
                print(f"rep {rep + 1} {mode:16s} {r.operations / r.seconds:8.0f} ops/s",
                      file=sys.stderr, flush=True)
    # Ratio per repetition (each mode against the no-probe run of the same
    # repetition), then the median over repetitions: robust to slow drift.
    print(f"{'mode':16s} {'ops/s (median)':>15s} {'ratio':>7s} {'min':>6s} {'max':>6s}"
          "   (goal: hist >= 0.97)")
    for m in modes:
        ratios = [r / n for r, n in zip(rates[m], rates["none"])]
        print(f"{m:16s} {statistics.median(rates[m]):15.0f} {statistics.median(ratios):7.3f}"
              f" {min(ratios):6.3f} {max(ratios):6.3f}")
    return 0


def pin(server_pid: int) -> None:
    """Server on CPU 0, load (this process) on CPU 1: the probe runs in the server's
    syscalls, so its cost lands where it would, and the two stop trading places."""
    if os.cpu_count() < 2:
        return
    for task in os.listdir(f"/proc/{server_pid}/task"):
        os.sched_setaffinity(int(task), {0})
    os.sched_setaffinity(0, {1})


if __name__ == "__main__":
    sys.exit(main())
