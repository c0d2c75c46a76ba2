"""Stack samples from any supported profiler output: one table, folded stacks, slices by
time and phase, differential folds.

Inputs (one parser module each, in ``mongoprobe.formats``, each in the format
registry as a stack format; ``detect`` picks one from the first 64 KiB with the
registry's "is this my format?" checks):

    perf       perf script output (perf record -g)          formats/perf_script.py
    bpftrace   bpftrace stack maps, text or -f json          formats/bpftrace_stacks.py
    dtrace     DTrace aggregated stack()/ustack() output     formats/dtrace_stacks.py
    folded     folded stacks ("frame;frame;frame COUNT")     formats/folded.py

The stack-sample table (``load``), one row per (time bucket, pid, tid, comm, stack):

    time     float64  start of the time bucket, seconds, in the input's own time base
                      (perf: its timestamps; bpftrace: the time key, seconds since the
                      tool started; NaN when the input has no time: DTrace, folded)
    second   int64    floor(time): the one-second bucket (-1 when time is NaN)
    pid      int64    process id (-1 when the input does not say)
    tid      int64    thread id (-1 when the input does not say)
    comm     str      thread name ("" when the input does not say)
    frames   str      the stack root -> leaf, frames joined by ";" (names cleaned as
                      inferno's collapsers clean them; the comm is not in it)
    count    int64    samples (the map's value for bpftrace and DTrace)
    weight   int64    what flame graphs and shares add up: perf's period when perf
                      printed one (as inferno-collapse-perf), else = count

``load(..., bucket=B)`` sets the bucket (seconds; ``None``: one row per sample time,
as the heat map needs). ``df.attrs`` holds ``format``, ``source``, ``stats`` (the
parser's counters: samples, skipped events, empty stacks) and ``meta`` (bpftrace's
clock line, pid, unit).

Folded stacks (``fold``, ``folded``, ``write_folded``): ``ROOT;frame;...;leaf COUNT``,
sorted, where ROOT is the comm with spaces made ``_`` (no root when the comm is
unknown) and COUNT the summed weight: for ``perf script`` input, byte for byte what
``inferno-collapse-perf`` (default options) prints.

Frame categories and the flat profile are in ``mongoprobe.analysis.cpu_categories``; a recorded run's
profile (wall-clock times, per-phase shares and flame graphs) in
``mongoprobe.analysis.run_profile``.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections import defaultdict
from typing import IO, Any, Iterable, Iterator

from mongoprobe.formats import folded as folded_format
from mongoprobe.formats import registry, stack_table
from mongoprobe.formats.errors import FormatError
from mongoprobe.formats.stack_table import COLUMNS
from mongoprobe.model.phase import Phase, phases_from  # noqa: F401  (the notebooks' names)

# The command line's names of the stack formats -> their names in the format registry.
FORMATS = {"perf": "perf-script", "bpftrace": "bpftrace-stacks", "dtrace": "dtrace-stacks",
           "folded": "folded"}
FORMAT_NAMES = tuple(FORMATS)
HEAD_BYTES = 65536


# --- input ----------------------------------------------------------------------------


def detect(head: str, source: str = "<input>") -> str:
    """The format name of a stacks input from its first bytes; FormatError if none."""
    name = registry.detect(head, kind="stacks")
    if name is None:
        first = next((x for x in head.splitlines() if x.strip()), "")
        raise FormatError(source, 1, "perf script, bpftrace stack maps, DTrace stacks or "
                          "folded stacks", first)
    return next(k for k, v in FORMATS.items() if v == name)


@contextlib.contextmanager
def open_input(path: str | os.PathLike | IO) -> Iterator[tuple[IO, str]]:
    """A binary file object for a path, ``-`` (stdin) or an open file, with its name."""
    if hasattr(path, "read"):
        yield path, getattr(path, "name", "<input>")
    elif str(path) == "-":
        yield io.BufferedReader(io.FileIO(sys.stdin.fileno(), closefd=False),
                                HEAD_BYTES * 4), "<stdin>"
    else:
        with open(path, "rb", buffering=HEAD_BYTES * 4) as fh:
            yield fh, str(path)


def _peek(fh: IO) -> str:
    """The first bytes of the input as text, without consuming them."""
    if hasattr(fh, "peek"):
        head = fh.peek(HEAD_BYTES)[:HEAD_BYTES]
    elif fh.seekable():
        pos = fh.tell()
        head = fh.read(HEAD_BYTES)
        fh.seek(pos)
    else:
        raise ValueError("give the stacks format of an unseekable input")
    return head if isinstance(head, str) else head.decode("utf-8", "replace")


def samples(path: str | os.PathLike | IO, format: str | None = None,
            stats: dict | None = None, meta: dict | None = None
            ) -> Iterator[tuple]:
    """Samples ``(time, pid, tid, comm, frames, count, weight)`` of a stacks input,
    streamed. ``format``: perf | bpftrace | dtrace | folded, or None to detect it."""
    with open_input(path) as (fh, source):
        fmt = format or detect(_peek(fh), source)
        if meta is not None:
            meta["format"] = fmt
        if fmt not in FORMATS:
            raise ValueError(f"unknown stacks format {fmt!r} (one of {FORMAT_NAMES})")
        yield from stack_table.stream(registry.get(FORMATS[fmt]).reader(), fh, source,
                                      stats, meta)


def read_folded(path: str | os.PathLike | IO) -> dict[str, int]:
    """A folded file -> {stack: count} (counts of repeated stacks added)."""
    out: dict[str, int] = defaultdict(int)
    with open_input(path) as (fh, source):
        for _t, _p, _i, _c, frames, _n, w in folded_format.read(fh, source):
            out[frames] += w
    return dict(out)


# --- the table ------------------------------------------------------------------------


def load(path: str | os.PathLike | IO, format: str | None = None,
         bucket: float | None = 1.0):
    """The stack-sample table (columns in the module doc) of a stacks input."""
    stats: dict = {}
    meta: dict = {}
    df = stack_table.aggregate(samples(path, format, stats, meta), bucket)
    df.attrs.update(format=meta.pop("format", format), source=str(getattr(path, "name", path)),
                    stats=stats, meta=meta)
    return df


def empty():
    return stack_table.table([])


# --- folded ---------------------------------------------------------------------------


def root_of(comm: str) -> str:
    return comm.replace(" ", "_")


def fold(path: str | os.PathLike | IO, format: str | None = None,
         stats: dict | None = None, meta: dict | None = None) -> dict[str, int]:
    """A stacks input -> {folded stack: weight}, streamed (memory grows with the number
    of distinct stacks, not with the input)."""
    acc: dict[tuple[str, str], int] = {}
    get = acc.get
    for _t, _p, _i, comm, frames, _c, w in samples(path, format, stats, meta):
        k = (comm, frames)
        acc[k] = get(k, 0) + w
    out: dict[str, int] = defaultdict(int)
    for (comm, frames), w in acc.items():
        out[root_of(comm) + ";" + frames if comm else frames] += w
    return dict(out)


def folded(df, by: str = "weight") -> dict[str, int]:
    """The table -> {folded stack: sum of ``by``} (root = comm, as ``fold``)."""
    out: dict[str, int] = defaultdict(int)
    for comm, frames, w in zip(df["comm"], df["frames"], df[by]):
        out[root_of(comm) + ";" + frames if comm else frames] += int(w)
    return dict(out)


def folded_lines(counts: dict[str, int]) -> Iterator[str]:
    """Sorted ``stack count`` lines (inferno's order: by stack, bytewise)."""
    for stack in sorted(counts):
        yield f"{stack} {counts[stack]}\n"


def write_folded(counts: dict[str, int], fh: IO) -> int:
    n = 0
    for line in folded_lines(counts):
        fh.write(line)
        n += 1
    return n


# --- slices and phases ------------------------------------------------------------------


def slice_time(df, start: float | None = None, end: float | None = None):
    """Rows whose time bucket starts in [start, end). Rows without time are dropped
    as soon as a bound is given."""
    mask = df["time"].notna() if (start is not None or end is not None) else None
    if start is not None:
        mask &= df["time"] >= start
    if end is not None:
        mask &= df["time"] < end
    out = df if mask is None else df[mask]
    out = out.reset_index(drop=True)
    out.attrs = dict(df.attrs)
    return out


def slice_phase(df, phase: Phase):
    """Rows whose time bucket starts in the phase."""
    return slice_time(df, phase.start, phase.end)


def by_phase(df, phases: Iterable[Phase]) -> dict[str, Any]:
    return {p.name: slice_phase(df, p) for p in phases}


# --- differential -----------------------------------------------------------------------


def diff_folded(before: dict[str, int], after: dict[str, int], normalize: bool = False,
                scale: float | None = None) -> list[tuple[str, int, int]]:
    """``difffolded.pl``: every stack of either side with both counts (0 where absent),
    sorted by stack. ``normalize`` scales the first side to the second's total, as
    ``difffolded.pl -n`` / ``inferno-diff-folded -n``; ``scale`` multiplies the first
    side by that factor instead (a comparison's per-operation graphs: the second side's
    operations over the first's). Scaled counts are truncated to integers, as ``-n``."""
    t1, t2 = sum(before.values()), sum(after.values())
    # (num, den): a * num / den in that order, as inferno computes -n
    factor = ((scale, 1) if scale is not None else
              (t2, t1) if normalize and t1 != t2 and t1 else None)
    rows = []
    for stack in sorted(set(before) | set(after)):
        a = before.get(stack, 0)
        if factor is not None:
            a = int(a * factor[0] / factor[1])
        rows.append((stack, a, after.get(stack, 0)))
    return rows


def diff_lines(rows: Iterable[tuple[str, int, int]]) -> Iterator[str]:
    for stack, a, b in rows:
        yield f"{stack} {a} {b}\n"
