"""Regenerate the golden outputs of the foreign-format parsers from the real samples.

USAGE (from the repository root):
    python tests/regen_formats.py        # or: python -m tests.regen_formats

For every (sample, format) pair in CASES it writes
tests/expected/formats/<sample dir>/<sample stem>.<format>.csv: the parser's DataFrame
as CSV (wall-clock times read as UTC, the zone the samples were recorded in). A pair
listed in ERRORS is damaged on purpose; its golden is <stem>.<format>.error holding the
FormatError message. Review the diff before committing: tests/test_formats.py compares
against these files byte for byte.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
EXPECTED = ROOT / "tests" / "expected" / "formats"
TZ = "UTC"

# (sample path under samples/, registry format name)
CASES: list[tuple[str, str]] = [
    ("ycsb/ycsb-0.17-load.status.txt", "ycsb"),
    ("ycsb/ycsb-0.17-workloada-run.status.txt", "ycsb"),
    ("ycsb/ycsb-0.17-workloada-run.summary.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-load.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-load.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-workloada-run.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-workloada-run.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-workloadb-run.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-workloadb-run.txt", "ycsb-summary"),
    ("ycsb/ycsb-0.17-ferretdb-load+run.stderr.txt", "ycsb"),
    ("ycsb/ycsb-0.17-ferretdb-load+run.stdout.txt", "ycsb-summary"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "iibench"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "iibench-summary"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "insert-benchmark-hist"),
    ("sysstat/vmstat-1.txt", "vmstat"),
    ("sysstat/vmstat-t-1.txt", "vmstat"),
    ("sysstat/vmstat-nw-1.txt", "vmstat"),
    ("sysstat/vmstat-1-26.txt", "vmstat"),
    ("sysstat/seed004-smartos-vmstat-1.txt", "vmstat"),
    ("sysstat/iostat-x-1-3.txt", "iostat"),
    ("sysstat/iostat-x-1-3.txt", "iostat-totals"),
    ("sysstat/iostat-x-1-3.txt", "iostat-cpu"),
    ("sysstat/iostat-xmt-1-3.txt", "iostat"),
    ("sysstat/iostat-xmt-1-3.txt", "iostat-cpu"),
    ("sysstat/iostat-xk-d-1-3.txt", "iostat"),
    ("sysstat/iostat-xt-iso-2dev.txt", "iostat"),
    ("sysstat/iostat-xt-iso-2dev.txt", "iostat-totals"),
    ("sysstat/iostat-d-1-3.txt", "iostat"),
    ("sysstat/iostat-d-1-3.txt", "iostat-totals"),
    ("sysstat/mpstat-P-ALL-1-3.txt", "mpstat"),
    ("sysstat/pidstat-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-t-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-h-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-hHt-udwr-p-1-3.txt", "pidstat"),
    ("insert_benchmark/seed000-io-cpu-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed000-ips-qps-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed000-glued-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed001-server32730-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed001-server32730-hist.txt", "insert-benchmark-hist"),
]
# pairs whose golden is the FormatError message (the input cannot be read, on purpose)
ERRORS = {("insert_benchmark/seed000-glued-tables.txt", "insert-benchmark")}


def golden_path(sample: str, fmt: str) -> Path:
    d, _, name = sample.rpartition("/")
    stem = name.removesuffix(".txt")
    return EXPECTED / d / f"{stem}.{fmt}.{'error' if (sample, fmt) in ERRORS else 'csv'}"


def render(sample: str, fmt: str) -> str:
    """What the golden file holds for one pair: the CSV, or the error message."""
    from mongoprobe.formats import registry
    from mongoprobe.formats.errors import FormatError

    path = SAMPLES / sample
    try:
        df = registry.parse(fmt, path, f"samples/{sample}", tz=TZ)
    except FormatError as e:
        if (sample, fmt) not in ERRORS:
            raise
        return str(e) + "\n"
    if (sample, fmt) in ERRORS:
        raise AssertionError(f"{sample} ({fmt}) parsed, but it is listed in ERRORS")
    return df.to_csv(index=False, lineterminator="\n")


def main() -> int:
    sys.path.insert(0, str(ROOT / "analyzer"))  # works without an installed package too
    for sample, fmt in CASES:
        path = golden_path(sample, fmt)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = render(sample, fmt)
        old = path.read_text() if path.exists() else None
        path.write_text(text)
        state = "unchanged" if old == text else ("new" if old is None else "UPDATED")
        print(f"{state:9} {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
