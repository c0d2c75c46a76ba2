#!/usr/bin/env python3
"""uprobe_trap.py - what one uprobe (and uretprobe) hit costs on this machine.

USAGE: .venv/bin/python bench/uprobe_trap.py [--calls N] [--reps N]

The TLS hooks (probes/mongo_tls.h) take 4 uprobe hits per request (OpenSSL: SSL_read
and SSL_write, entry and uretprobe; Go: (*Conn).Read and Write, entry and a RET). The
kernel's bpf_stats (bench/probe_cost.py) count their BPF programs' run time only, not
the breakpoint trap and uprobe handling around it, which is most of their cost. This
compiles bench/uprobe_trap.c (an empty function called N times), and times the calls
without a probe, with an empty bpftrace uprobe on the function, and with an empty
uprobe and uretprobe; the differences are the cost per hit. Medians of --reps runs,
alternating. Needs root, bpftrace and a C compiler.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def build(tmp: str) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        sys.exit("uprobe_trap: no C compiler (cc/gcc)")
    exe = Path(tmp) / "uprobe_trap"
    subprocess.run([cc, "-O2", "-o", str(exe), str(HERE / "uprobe_trap.c")], check=True)
    return exe


def timed(exe: Path, calls: int, program: str | None) -> float:
    """ns per call of f, with bpftrace running PROGRAM on it (None: no probe)."""
    if program is None:
        out = subprocess.run([str(exe), str(calls)], capture_output=True, text=True,
                             check=True).stdout
        return float(out.split()[0])
    # the program waits WAIT s before calling f; bpftrace attaches meanwhile, saying
    # "Attaching" on stdout first (it ends when the traced pid exits)
    wait = 8
    target = subprocess.Popen([str(exe), str(calls), str(wait)], stdout=subprocess.PIPE,
                              text=True)
    bt = subprocess.Popen(["bpftrace", "-p", str(target.pid), "-e",
                           program.replace("EXE", str(exe))],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    t0 = time.monotonic()
    for line in bt.stdout:
        if "Attaching" in line:
            break
    # bpftrace says "Attaching" just before it attaches: give it a moment
    if time.monotonic() - t0 > wait - 2:
        target.kill()
        sys.exit("uprobe_trap: bpftrace attached too late; rerun on a less busy machine")
    out = target.communicate()[0]
    bt.communicate(timeout=30)
    return float(out.split()[0])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=100000)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args(argv)
    if not shutil.which("bpftrace"):
        print("uprobe_trap: bpftrace is not installed", file=sys.stderr)
        return 2
    rows = {"no probe": None, "uprobe": "uprobe:EXE:f { }",
            "uprobe+uretprobe": "uprobe:EXE:f { } uretprobe:EXE:f { }"}
    got: dict[str, list[float]] = {k: [] for k in rows}
    with tempfile.TemporaryDirectory(prefix="uprobe_trap.") as tmp:
        exe = build(tmp)
        for _ in range(a.reps):
            for name, prog in rows.items():
                got[name].append(timed(exe, a.calls, prog))
    base = statistics.median(got["no probe"])
    print(f"ns per call of an empty function ({a.calls} calls, median of {a.reps}):")
    for name in rows:
        m = statistics.median(got[name])
        extra = f"  +{m - base:,.0f} ns per call" if name != "no probe" else ""
        print(f"  {name:18s}{m:10,.1f}{extra}  (runs: {', '.join(f'{v:,.0f}' for v in got[name])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
