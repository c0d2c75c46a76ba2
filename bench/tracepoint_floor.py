#!/usr/bin/python3
"""tracepoint_floor.py - the floor of a syscall probe's cost: the bcc latency probe's
own tracepoints, each running a program that only tests the pid and counts.

USAGE: /usr/bin/python3 bench/tracepoint_floor.py -p PID [--kind probe|idle|sock] [--list]

bench/probe_cost.py runs it as its `bcc floor` row, beside the real probes, so the
BPF ns per request and the throughput ratio of the tracepoint hits themselves (the
kernel's syscall tracepoint path, the program's call, bpf_stats' own clock reads,
one helper and a per-CPU counter) are measured in the same run as the probes'.
What a probe costs above this row is its work; this row is what no program on these
tracepoints can avoid.

The tracepoints are those of probes/mongo_wire.h as the bcc tools compile it on this
machine (TLS off): its TRACEPOINT_PROBE lines after the C preprocessor, with the
macros mongolatency.py defines for the architecture, and the tracepoints the tools
attach those programs to beside their own (mongolatency.SHARED_PROGRAMS), so the
list follows the probe.
--list prints them and exits. Ctrl-C ends it and prints one JSON line: the
tracepoints and how many of their hits were the target's.

Two more kinds tell the floor's parts apart (bench/probe_cost.py's `idle` and `sock`
rows):
  idle   one syscall tracepoint that the load never hits (vhangup): while any syscall
         tracepoint has a program, every syscall of every task takes the kernel's
         slower syscall path, which this alone costs;
  sock   the socket layer's tracepoints sock_recv_length and sock_send_length (Linux
         6.4 and later), hit inside every socket receive and send: the same pid test
         and count without the syscall tracepoints.
"""

import argparse
import json
import os
import platform
import re
import signal
import subprocess
import sys
from pathlib import Path

HEADER = Path(__file__).resolve().parents[1] / "probes" / "mongo_wire.h"


# the other kinds' tracepoints, as category:name
KINDS = {"idle": ["syscalls:sys_enter_vhangup"],
         "sock": ["sock:sock_recv_length", "sock:sock_send_length"]}


def tracepoints(header: Path = HEADER) -> list[str]:
    """The syscall tracepoints mongo_wire.h attaches on this architecture."""
    text = "\n".join(ln for ln in header.read_text().splitlines()
                     if not ln.lstrip().startswith("#include"))
    defs = ["-DMW_TARGET_PID=1"]
    if platform.machine() == "x86_64":
        defs.append("-D__x86_64__")     # cpp defines it for the host, said here anyway
    out = subprocess.run(["cpp", "-P", *defs], input=text, capture_output=True,
                         text=True, check=True).stdout
    own = re.findall(r"TRACEPOINT_PROBE\(syscalls,\s*(\w+)\)", out)
    # and those the tools attach a program of it to beside its own (one per role)
    sys.path.insert(0, str(header.parent))
    from mongolatency import SHARED_PROGRAMS
    shared = [t for p in own for t in SHARED_PROGRAMS.get(p, ())]
    return [f"syscalls:{t}" for t in own + shared]


PROGRAM = """
BPF_PERCPU_ARRAY(hits, u64, 1);
"""

CLAUSE = """
TRACEPOINT_PROBE(%s, %s)
{
    if ((bpf_get_current_pid_tgid() >> 32) != %d)
        return 0;
    u32 z = 0;
    u64 *n = hits.lookup(&z);
    if (n)
        (*n)++;
    return 0;
}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-p", "--pid", type=int, help="the traced server's pid")
    ap.add_argument("--kind", choices=["probe", *KINDS], default="probe",
                    help="the probe's tracepoints (default), one syscall tracepoint "
                         "nothing hits, or the socket tracepoints")
    ap.add_argument("--list", action="store_true", help="print the tracepoints and exit")
    a = ap.parse_args()
    tps = KINDS.get(a.kind) or tracepoints()
    if a.list:
        print("\n".join(tps))
        return 0
    if a.pid is None:
        ap.error("-p PID is needed")
    from bcc import BPF     # only here: --list runs without bcc
    b = BPF(text=PROGRAM + "".join(CLAUSE % (*tp.split(":"), a.pid) for tp in tps))
    signal.signal(signal.SIGTERM, signal.default_int_handler)    # ends it as Ctrl-C does
    print(f"Tracing {len(tps)} tracepoints ({a.kind}) for PID {a.pid} (the floor: a pid "
          "test and a count)... Hit Ctrl-C to end.", file=sys.stderr, flush=True)
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    n = sum(b["hits"][0])
    print(json.dumps({"tracepoints": tps, "target_hits": n}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
