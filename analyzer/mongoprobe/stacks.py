"""Stack samples from any supported profiler output: one table, folded stacks, slices by
time and phase, differential folds, frame categories and a flat profile.

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

A sample's category (``categories``): the frames are looked at from the leaf towards
the root; the first frame that matches any rule of ``flamegraphs/categories.toml``
decides, and among the rules matching that frame the first in the file wins; a stack
with no matching frame is ``other``. So a malloc called from BSON parsing is
``allocator``, and a futex wait in SQLite's locking is ``locks``.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from .formats import folded as folded_format
from .formats import registry, stack_table
from .formats.errors import FormatError
from .formats.stack_table import COLUMNS

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


def frames_tuple(frames: str) -> tuple[str, ...]:
    """The ``frames`` column as a tuple, root first."""
    return tuple(frames.split(";")) if frames else ()


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


@dataclass(frozen=True)
class Phase:
    """A named time range [start, end) in the same time base as the table's ``time``."""
    name: str
    start: float
    end: float


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
    return slice_time(df, phase.start, phase.end)


def phases_from(obj: Any) -> list[Phase]:
    """Phases from a DataFrame or records with name/start/end, a ``{"phases": [...]}``
    dict (``mongoprobe phases --json``), or a JSON / CSV file holding either."""
    if isinstance(obj, (str, os.PathLike)):
        text = Path(obj).read_text()
        if text.lstrip().startswith(("{", "[")):
            import json
            obj = json.loads(text)
        else:
            import pandas as pd
            obj = pd.read_csv(io.StringIO(text))
    if isinstance(obj, dict):
        obj = obj.get("phases", [])
    if hasattr(obj, "to_dict"):
        obj = obj.to_dict(orient="records")
    out = []
    for r in obj:
        out.append(r if isinstance(r, Phase) else
                   Phase(str(r["name"]), float(r["start"]), float(r["end"])))
    return out


def by_phase(df, phases: Iterable[Phase]) -> dict[str, Any]:
    return {p.name: slice_phase(df, p) for p in phases}


# --- differential -----------------------------------------------------------------------


def diff_folded(before: dict[str, int], after: dict[str, int], normalize: bool = False
                ) -> list[tuple[str, int, int]]:
    """``difffolded.pl``: every stack of either side with both counts (0 where absent),
    sorted by stack. ``normalize`` scales the first side to the second's total, as
    ``difffolded.pl -n`` / ``inferno-diff-folded -n`` (truncated to integers)."""
    t1, t2 = sum(before.values()), sum(after.values())
    rows = []
    for stack in sorted(set(before) | set(after)):
        a = before.get(stack, 0)
        if normalize and t1 != t2 and t1:
            a = int(a * t2 / t1)
        rows.append((stack, a, after.get(stack, 0)))
    return rows


def diff_lines(rows: Iterable[tuple[str, int, int]]) -> Iterator[str]:
    for stack, a, b in rows:
        yield f"{stack} {a} {b}\n"


# --- categories -------------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    name: str
    title: str
    color: str
    regex: re.Pattern


def categories_file() -> Path:
    env = os.environ.get("MONGOPROBE_CATEGORIES")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "flamegraphs" / "categories.toml"


def load_rules(path: str | os.PathLike | None = None) -> list[Rule]:
    """The category rules (``flamegraphs/categories.toml`` by default), in file order."""
    import tomllib

    p = Path(path) if path else categories_file()
    try:
        data = tomllib.loads(p.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no category rules (set MONGOPROBE_CATEGORIES)")
    except tomllib.TOMLDecodeError as e:
        raise FormatError(str(p), 0, "TOML category rules", str(e))
    rules = []
    for i, c in enumerate(data.get("category", []), 1):
        try:
            pats = c["match"]
            rx = re.compile("|".join(f"(?:{x})" for x in pats))
            rules.append(Rule(c["name"], c.get("title", c["name"]), c.get("color", ""), rx))
        except (KeyError, re.error) as e:
            raise FormatError(str(p), 0, f"category #{i} with name and match regexes",
                              str(e))
    return rules


OTHER = "other"


class Categorizer:
    """Frame -> rule and stack -> category, with caches (frames repeat a lot)."""

    def __init__(self, rules: list[Rule] | None = None):
        self.rules = load_rules() if rules is None else rules
        self._frame: dict[str, str | None] = {}
        self._stack: dict[str, str] = {}

    def frame(self, name: str) -> str | None:
        got = self._frame.get(name, False)
        if got is False:
            got = next((r.name for r in self.rules if r.regex.search(name)), None)
            self._frame[name] = got
        return got

    def stack(self, frames: str) -> str:
        got = self._stack.get(frames)
        if got is None:
            got = OTHER
            for f in reversed(frames.split(";")):
                c = self.frame(f)
                if c is not None:
                    got = c
                    break
            self._stack[frames] = got
        return got

    def series(self, df):
        import pandas as pd
        return pd.Series([self.stack(f) for f in df["frames"]], index=df.index,
                         dtype=object, name="category")


def category_table(df, phases: Iterable[Phase] | None = None,
                   rules: list[Rule] | None = None):
    """Share of samples by category, per phase (``all`` without phases).

    Columns: phase, category, samples (sum of count), weight (sum of weight), share
    (weight / the phase's total weight; perf's period for perf input, so shares match
    the flame graph's widths). Rows: each phase in order, categories by share."""
    import pandas as pd

    cat = Categorizer(rules)
    parts = [("all", df)] if phases is None else [(p.name, slice_phase(df, p))
                                                     for p in phases]
    rows = []
    for name, part in parts:
        c = cat.series(part)
        g = part.assign(category=c).groupby("category")[["count", "weight"]].sum()
        total = g["weight"].sum()
        g = g.sort_values(["weight", "count"], ascending=False)
        for k, r in g.iterrows():
            rows.append((name, k, int(r["count"]), int(r["weight"]),
                         float(r["weight"]) / total if total else 0.0))
    out = pd.DataFrame(rows, columns=["phase", "category", "samples", "weight", "share"])
    return out.astype({"samples": "int64", "weight": "int64", "share": "float64"})


def top_functions(df, n: int = 20):
    """perf report's flat profile: per function (frame name) ``self`` (weight of the
    samples it is the leaf of) and ``total`` (samples it is anywhere on the stack of,
    once per sample), with their percentages of all weight, by self then total."""
    import pandas as pd

    self_w: dict[str, int] = defaultdict(int)
    total_w: dict[str, int] = defaultdict(int)
    all_w = 0
    for frames, w in zip(df["frames"], df["weight"]):
        w = int(w)
        all_w += w
        fs = frames.split(";")
        self_w[fs[-1]] += w
        for f in set(fs):
            total_w[f] += w
    rows = sorted(total_w, key=lambda f: (-self_w.get(f, 0), -total_w[f], f))[:n]
    out = pd.DataFrame({
        "function": rows,
        "self": [self_w.get(f, 0) for f in rows],
        "total": [total_w[f] for f in rows]})
    out["self_pct"] = 100.0 * out["self"] / all_w if all_w else 0.0
    out["total_pct"] = 100.0 * out["total"] / all_w if all_w else 0.0
    return out.astype({"self": "int64", "total": "int64"})


# --- recorded runs (mongoprobe record's RUN/ directory) --------------------------------


def run_stacks(run, which: str = "profile", bucket: float | None = 1.0):
    """The table of a run's profile (``profile.bt.txt``; ``offcpu`` for off-CPU), with
    ``time`` moved to wall-clock epoch seconds by the probe's ``# clock`` line and the
    run's clock offset, so phases (wall clock) slice it."""
    p = run.file(which)
    if p is None:
        raise LookupError(f"{run.path}: no {which} output in this run")
    df = load(p, bucket=None)
    clock = df.attrs.get("meta", {}).get("clock")
    if clock:
        from .formats.bpftrace_json import wall_time
        df["time"] = wall_time(clock, df["time"], run.offset_ns)
    if bucket:
        df["time"] = (df["time"] // bucket) * bucket
    import numpy as np
    t = df["time"].to_numpy()
    df["second"] = np.where(np.isnan(t), -1, np.floor(np.nan_to_num(t, nan=-1.0))
                            ).astype("int64")
    return df


def run_category_shares(run, phases) -> dict[str, dict[str, float]]:
    """{phase: {category: share}} of a run's on-CPU profile (for the phase table)."""
    df = run_stacks(run)
    t = category_table(df, phases_from(phases))
    out: dict[str, dict[str, float]] = {}
    for r in t.itertuples(index=False):
        out.setdefault(r.phase, {})[r.category] = round(r.share, 6)
    return out


def run_flamegraphs(run, phases, diff: tuple[str, str] | None = None
                    ) -> list[tuple[str, str]]:
    """[(title, SVG text)] per phase of a run's profile, and the differential graph of
    ``diff`` = (phase A, phase B) when given (for the HTML report)."""
    import tempfile

    from . import flamegraph

    df = run_stacks(run)
    ph = phases_from(phases)
    name = Path(run.path).name
    pid = run.manifest.get("target", {}).get("pid")
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in ph:
            part = slice_phase(df, p)
            if not len(part):
                continue
            title = flamegraph.title_for(name, phase=p.name, pid=pid)
            svg = Path(tmp) / f"{len(out)}.svg"
            flamegraph.render(folded(part), svg, title=title)
            out.append((title, svg.read_text()))
        if diff:
            a, b = (next(p for p in ph if p.name == d) for d in diff)
            title = flamegraph.title_for(name, phase=f"{a.name} -> {b.name}", pid=pid,
                                         diff=True)
            svg = Path(tmp) / "diff.svg"
            flamegraph.render_diff(folded(slice_phase(df, a)), folded(slice_phase(df, b)),
                                   svg, title=title)
            out.append((title, svg.read_text()))
    return out
