#!/usr/bin/env python3
"""fold_throughput.py - perf script -> folded stacks: mongoprobe vs inferno-collapse-perf.

USAGE: .venv/bin/python bench/fold_throughput.py [--reps N] [--copies 1,4,16]
       [--input samples/stacks/perf-ferretdb-mixedload.txt]

Folds the same real ``perf script`` sample (FerretDB under mixedload, see
samples/stacks/README.md) and copies of it concatenated 4 and 16 times, with
mongoprobe (``stacks.fold``) and with ``inferno-collapse-perf`` (pinned by
scripts/setup.sh), in one run, and prints for each size:

  * throughput in MB/s, median of --reps runs. mongoprobe: in-process, input loaded
    into memory before timing, output written to memory (what the fold costs);
    inferno: the binary on the file in the page cache, output to /dev/null (process
    start included: about a millisecond), with its default thread count (this
    machine's cores) and with --nthreads 1;
  * the time ratio mongoprobe / inferno (goal: at most 3);
  * peak memory (VmHWM of a child process) of ``mongoprobe fold FILE`` reading
    the file -- streaming, so the 4x and 16x inputs should need no more than 1x --
    next to a child that only imports the same modules, and inferno's.

Both outputs are compared byte for byte first (they must be identical). Read the
cold row (1x) too: the copies repeat the same call chains, so from the second copy
on every chain is already in mongoprobe's cache.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analyzer"))

from mongoprobe.model import stack_samples as stacks  # noqa: E402
from mongoprobe.views.flamegraph import inferno_bin  # noqa: E402

# The children report their own peak (VmHWM, per address space, so not what a fork
# of this big parent held before exec: ru_maxrss would include that).
HWM = ("print([x.split()[1] for x in open('/proc/self/status') if x.startswith('VmHWM')][0])")
CHILD_FOLD = ("import sys; sys.path.insert(0, {root!r}); from mongoprobe.model import stack_samples as stacks; "
              "c = stacks.fold(sys.argv[1]); stacks.write_folded(c, open('/dev/null', 'w')); "
              + HWM)
CHILD_IMPORT = "import sys; sys.path.insert(0, {root!r}); from mongoprobe.model import stack_samples as stacks; " + HWM


def ours(data: bytes) -> tuple[float, str]:
    t = time.perf_counter()
    out = io.StringIO()
    stacks.write_folded(stacks.fold(io.BytesIO(data), "perf"), out)
    return time.perf_counter() - t, out.getvalue()


def inferno(path: Path, threads: int | None) -> float:
    argv = [str(inferno_bin("inferno-collapse-perf")), str(path)]
    if threads:
        argv[1:1] = ["--nthreads", str(threads)]
    t = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def self_reported_mb(argv: list[str]) -> float:
    """Peak resident memory (VmHWM, KiB) a Python child prints at its end, in MB."""
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    return int(out.split()[-1]) / 1024


def polled_mb(argv: list[str]) -> float:
    """Peak resident memory of a binary: its VmHWM read every millisecond until it
    exits (VmHWM only grows, so the last read is within a millisecond of the peak)."""
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    peak = 0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM"):
                        peak = max(peak, int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            pass
        time.sleep(0.001)
    return peak / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", type=Path,
                    default=ROOT / "samples" / "stacks" / "perf-ferretdb-mixedload.txt")
    ap.add_argument("--copies", default="1,4,16")
    ap.add_argument("--reps", type=int, default=7)
    a = ap.parse_args()
    if not inferno_bin("inferno-collapse-perf").exists():
        print(f"{inferno_bin('inferno-collapse-perf')} missing: run scripts/setup.sh",
              file=sys.stderr)
        return 1
    base = a.input.read_bytes()
    copies = [int(x) for x in a.copies.split(",")]
    py = sys.executable
    print(f"input: {a.input.name} ({len(base) / 1e6:.2f} MB, real perf script of FerretDB); "
          f"cores: {os.cpu_count()}; median of {a.reps} runs")
    print(f"{'size':>5} {'MB':>7} {'mongoprobe':>11} {'inferno':>9} {'inferno-1t':>10} "
          f"{'ratio':>6} {'ratio-1t':>8}   (MB/s; ratio = mongoprobe time / inferno time)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="mongoprobe-bench-") as tmp:
        for n in copies:
            data = base * n
            path = Path(tmp) / f"x{n}.perf"
            path.write_bytes(data)
            want = subprocess.run([str(inferno_bin("inferno-collapse-perf")), str(path)],
                                  capture_output=True, check=True).stdout
            t0, got = ours(data)
            if got.encode() != want:
                print(f"{n}x: folded output differs from inferno's", file=sys.stderr)
                return 1
            t_ours = statistics.median(ours(data)[0] for _ in range(a.reps))
            t_inf = statistics.median(inferno(path, None) for _ in range(a.reps))
            t_inf1 = statistics.median(inferno(path, 1) for _ in range(a.reps))
            mb = len(data) / 1e6
            print(f"{n:>4}x {mb:>7.1f} {mb / t_ours:>11.1f} {mb / t_inf:>9.1f} "
                  f"{mb / t_inf1:>10.1f} {t_ours / t_inf:>6.2f} {t_ours / t_inf1:>8.2f}")
            rows.append((n, path))
        print("\npeak memory (VmHWM of a child process, MB):")
        imp = self_reported_mb([py, "-c", CHILD_IMPORT.format(root=str(ROOT / "analyzer"))])
        print(f"  python importing mongoprobe.model.stack_samples only: {imp:.1f}")
        for n, path in rows:
            m = self_reported_mb([py, "-c", CHILD_FOLD.format(root=str(ROOT / "analyzer")),
                                  str(path)])
            i = polled_mb([str(inferno_bin("inferno-collapse-perf")), str(path)])
            print(f"  {n:>3}x ({path.stat().st_size / 1e6:6.1f} MB input): mongoprobe fold "
                  f"{m:6.1f} (+{m - imp:.1f} over the import)   inferno {i:6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
