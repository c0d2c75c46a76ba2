"""Insert-benchmark (iibench) result tables and response-time histograms -> DataFrames.

The seeds' tables (field reports 000 and 001, docs/sources.md: ``samples/insert_benchmark/``), two
shapes, both read by header name::

    # engine first, unnamed (seed 000, the 2015 blog post)
             qps     r/s    rmb/s   wmb/s    r/o    rkb/o   wkb/o
    toku     850     2122    32.0   1.4      2.50    38.6   1.7

    # engine last, named (seed 001, SERVER-32730)
    ips.av  qps.av  wkb/i   Mcpu/q  size    rss     wmb/s   cpu     engine
    1584    31386   36.09   1184    116     103.5   57.2    37.2    WiredTiger-3.6.0

``parse_insert_benchmark(src)`` -- every table, long form, one row per cell:

    table   int64    table number in the input, from 0
    title   str      the last non-blank line above the table's header that is not part
                     of a table ("10i.0q", a sentence): tables one after the other share
                     it; "" when there is none
    row     int64    row number within the table, from 0
    engine  str      the row's engine/server label (toku, WiredTiger-3.6.0 ...)
    column  str      the header name as printed: ipsAvg ipsP95 qpsAvg qpsP95 dbSize rssSize
                     ips.av qps.av ips qps r/s rmb/s wmb/s r/o rkb/o wkb/o cs us sy us+sy
                     cs/o (us+sy)/o cs/i (us+sy)/i wkb/i r/q rkb/q Mcpu/q size rss cpu
    text    str      the cell as printed ("622gb", "14XXgb", "0.085000")
    value   float64  the cell's number ("622gb" -> 622); NaN when it has none ("14XXgb",
                     the blog's unknown size)

Units are the seeds' (seed 000 defines them in prose, seed 001 in the ticket): rates per
second; rmb/s wmb/s MB/s; */o */i */q per operation, insert, query; us sy cpu percent of
all CPUs; size/dbSize and rss/rssSize GB. How the normalised columns are computed from
the raw ones is ``mongoprobe.analysis.normalize`` (and its tests reproduce these tables).
``wide_tables(df)`` turns the long form back into one wide DataFrame per table.

``parse_insert_benchmark_hist(src)`` -- the per-client response-time histograms that
iibench.py prints at the end (seed 001)::

    256us       1ms       4ms      16ms      64ms     256ms        1s        4s       16s        gt         max
    # WiredTiger
        0         0         0         0       136      3348     46516         0         0         0    0.946401

    hist    int64    histogram number in the input, from 0 (one per printed row)
    label   str      the ``# LABEL`` line above the row, or the prefix iibench.py prints
                     before the header and the row ("Insert rt:"); "" when neither
    bucket  str      the header's label: 256us 1ms ... 16s, gt
    lo_us   float64  the bucket holds response times t with lo_us < t <= hi_us
    hi_us   float64  (iibench.py counts t <= 256us, then t <= 1ms ...; gt is t > 16s:
                     hi_us inf)
    count   int64    responses in the bucket
    max_s   float64  the row's ``max`` column: the largest response time, seconds

Not read: iibench's per-interval progress lines (none of the seeds has them, and no real
sample of them was available). Rows of the 2015 blog's ips/qps tables lost their cell
separators when the page was scraped (``tokumx4077536001119.5101.6622gb36gb``): such
glued cells cannot be split unambiguously, and raise ``FormatError`` at the glued
header. Any other damage -- a row with a different number of cells than its header, a
cell that is not a number, a histogram row with the wrong count -- raises ``FormatError``
naming the file and line.

USAGE::

    from mongoprobe.formats.insert_benchmark import parse_insert_benchmark, wide_tables
    t = wide_tables(parse_insert_benchmark("samples/insert_benchmark/seed000-io-cpu-tables.txt"))
    t[2][["ips", "r/s", "r/o"]]
"""

from __future__ import annotations

import math
import os
import re
from typing import IO

import pandas as pd

from .errors import FormatError
from .source import read_input

TABLE_COLUMNS = ("table", "title", "row", "engine", "column", "text", "value")
HIST_COLUMNS = ("hist", "label", "bucket", "lo_us", "hi_us", "count", "max_s")

KNOWN = {
    "ips", "qps", "ipsAvg", "ipsP95", "qpsAvg", "qpsP95", "dbSize", "rssSize", "ips.av",
    "qps.av", "wkb/i", "Mcpu/q", "size", "rss", "wmb/s", "rmb/s", "r/s", "cpu", "r/o",
    "rkb/o", "wkb/o", "cs", "us", "sy", "us+sy", "cs/o", "(us+sy)/o", "cs/i", "(us+sy)/i",
    "r/q", "rkb/q", "engine",
}  # fmt: skip
_CELL = re.compile(r"^(-?\d+(?:\.\d+)?)([a-z%]*)$|^\d*X+[a-z]*$")
_NAME = re.compile(r"^[A-Za-z(][\w.+/()%-]*$")
_BUCKET = re.compile(r"^(\d+)(us|ms|s)$")
_UNIT_US = {"us": 1.0, "ms": 1e3, "s": 1e6}


def _cell(tok: str) -> float | None:
    """A table cell's value (NaN for "14XXgb"), or None if ``tok`` is not a cell."""
    m = _CELL.match(tok)
    if not m:
        return None
    return float(m[1]) if m[1] is not None else math.nan


def _glued(tok: str) -> bool:
    return sum(k in tok for k in KNOWN if len(k) > 3) >= 2 and tok not in KNOWN


_RATES = {"ips", "qps", "ipsAvg", "qpsAvg", "ips.av", "qps.av"}


def _header(line: str) -> list[str] | None:
    """Column names if ``line`` is a table header: names only, at least three known ones,
    one of them an operation rate (ips, qps, ipsAvg, qps.av ...)."""
    toks = line.split()
    if len(toks) < 2 or not all(_NAME.match(t) and _cell(t) is None for t in toks):
        return None
    if not _RATES & set(toks):
        return None
    return toks if sum(t in KNOWN for t in toks) >= 3 else None


def _row(line: str, header: list[str]) -> tuple[str, list[str]] | None:
    """(engine, cells) if ``line`` is a row of ``header``'s table, else None."""
    toks = line.split()
    if header[-1] == "engine" and len(toks) == len(header):
        if _cell(toks[-1]) is None and all(_cell(t) is not None for t in toks[:-1]):
            return toks[-1], toks[:-1]
    if len(toks) == len(header) + 1 and _cell(toks[0]) is None:
        if all(_cell(t) is not None for t in toks[1:]):
            return toks[0], toks[1:]
    return None


def _rowish(line: str) -> bool:
    toks = line.split()
    return len(toks) >= 2 and sum(_cell(t) is not None for t in toks) >= len(toks) - 1


def _hist_header(toks: list[str]) -> int | None:
    """Index of the first bucket label if ``toks`` is an iibench histogram header."""
    if len(toks) < 3 or toks[-2:] != ["gt", "max"] or toks[0].startswith("#"):
        return None  # (a commented header is some other tool's summary)
    i = len(toks) - 2
    while i > 0 and _BUCKET.match(toks[i - 1]):
        i -= 1
    return i if len(toks) - 2 - i >= 1 else None


def is_insert_benchmark(text: str) -> bool:
    """Cheap check: an insert-benchmark table header (three or more of its column names,
    one a rate; or glued together as in seed 000, which the parser then refuses)."""
    for s in text[:65536].splitlines():
        toks = s.split()
        if _header(s) or (len(toks) == 1 and _glued(toks[0])):
            return True
    return False


def is_insert_benchmark_hist(text: str) -> bool:
    """Cheap check: an iibench response-time histogram header (``256us ... gt max``)."""
    return any(_hist_header(s.split()) is not None for s in text[:65536].splitlines())


def parse_insert_benchmark(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None
) -> pd.DataFrame:
    """Every result table, one row per cell (columns: module docstring).

    ``text_or_path``: the text, a path (any one-line ``str`` is a path) or an open file.
    Raises ``FormatError`` naming the file and line on glued or damaged tables, or when
    there is no table.
    """
    text, src = read_input(text_or_path, source)
    lines = text.splitlines()
    out: list[tuple] = []
    table, title, i = -1, "", 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if not s:
            i += 1
            continue
        toks = s.split()
        if len(toks) == 1 and _glued(toks[0]):
            raise FormatError(src, i + 1, "table cells separated by spaces (this header's "
                              "names are glued together, as in a scraped HTML table: its "
                              "rows cannot be split unambiguously)", line)  # fmt: skip
        header = _header(s)
        if header is None:
            if _hist_header(toks) is None and not s.startswith("#") and not _rowish(s):
                title = s
            i += 1
            continue
        table += 1
        nrow, j = 0, i + 1
        while j < len(lines) and lines[j].strip():
            r = _row(lines[j], header)
            if r is None:
                if _rowish(lines[j]) or nrow == 0:
                    ncells = len(header) - (header[-1] == "engine")
                    raise FormatError(src, j + 1, f"a row of the table headed at line {i + 1}:"
                                      f" an engine name and {ncells} cells", lines[j])
                break
            engine, cells = r
            names = header[:-1] if (header[-1] == "engine" and len(lines[j].split())
                                    == len(header)) else header  # fmt: skip
            for col, tok in zip(names, cells):
                out.append((table, title, nrow, engine, col, tok, _cell(tok)))
            nrow, j = nrow + 1, j + 1
        if nrow == 0:
            raise FormatError(src, i + 2, f"rows under the table header at line {i + 1}", "")
        i = j  # the title stays for the next table until other text comes
    if not out:
        raise FormatError(src, max(len(lines), 1), "an insert-benchmark table (a header "
                          "such as 'qps r/s rmb/s ...' and rows); none found")  # fmt: skip
    df = pd.DataFrame(out, columns=list(TABLE_COLUMNS))
    return df.astype({"table": "int64", "title": "str", "row": "int64", "engine": "str",
                      "column": "str", "text": "str", "value": "float64"})  # fmt: skip


def wide_tables(df: pd.DataFrame) -> list[pd.DataFrame]:
    """The long form back as one wide DataFrame per table: ``engine`` then the columns in
    their printed order, float64 values; ``attrs["title"]`` is the table's title."""
    tables = []
    for _, g in df.groupby("table", sort=True):
        cols = list(dict.fromkeys(g["column"]))
        w = g.pivot(index=["row", "engine"], columns="column", values="value")[cols]
        w = w.reset_index().drop(columns="row")
        w.columns.name = None
        w.attrs["title"] = str(g["title"].iloc[0])
        tables.append(w)
    return tables


def parse_insert_benchmark_hist(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None
) -> pd.DataFrame:
    """iibench.py response-time histogram rows, one row per bucket (module docstring)."""
    text, src = read_input(text_or_path, source)
    lines = text.splitlines()
    out: list[tuple] = []
    hist, i = -1, 0
    while i < len(lines):
        toks = lines[i].split()
        first = _hist_header(toks)
        if first is None:
            i += 1
            continue
        prefix, labels = " ".join(toks[:first]), toks[first:-1]
        bounds, lo = [], 0.0
        for lab in labels:
            if lab == "gt":
                bounds.append((lo, math.inf))
                continue
            m = _BUCKET.match(lab)
            hi = int(m[1]) * _UNIT_US[m[2]]
            if hi <= lo:
                raise FormatError(src, i + 1, "increasing bucket bounds", lines[i])
            bounds.append((lo, hi))
            lo = hi
        hdr, label, j = i + 1, "", i + 1
        while j < len(lines):
            s = lines[j].strip()
            if not s:
                j += 1
                continue
            if s.startswith("#"):
                label, j = s[1:].strip(), j + 1
                continue
            f = s.split()
            npre = len(toks[:first])
            body = f[npre:] if npre and " ".join(f[:npre]) == prefix else f
            if _hist_header(f) is not None or not _rowish(" ".join(body)):
                break  # the next histogram, or other text
            if len(f) != npre + len(labels) + 1 or " ".join(f[:npre]) != prefix:
                raise FormatError(src, j + 1, f"{len(labels)} counts and the max, as in the "
                                  f"histogram header (line {hdr})", lines[j])  # fmt: skip
            try:
                counts = [int(x) for x in f[npre:-1]]
                mx = float(f[-1])
            except ValueError:
                raise FormatError(src, j + 1, "integer counts and a max in seconds",
                                  lines[j]) from None
            hist += 1
            for lab, (blo, bhi), c in zip(labels, bounds, counts):
                out.append((hist, label or prefix, lab, blo, bhi, c, mx))
            label, j = "", j + 1
        i = j
    if not out:
        raise FormatError(src, max(len(lines), 1), "an iibench response-time histogram "
                          "('256us 1ms ... gt max' and rows); none found")  # fmt: skip
    df = pd.DataFrame(out, columns=list(HIST_COLUMNS))
    return df.astype({"hist": "int64", "label": "str", "bucket": "str", "lo_us": "float64",
                      "hi_us": "float64", "count": "int64", "max_s": "float64"})  # fmt: skip
