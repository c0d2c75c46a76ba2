"""Printed log2 histograms -> DataFrame: DTrace ``quantize``, bpftrace ``hist()``, bcc
``print_log2_hist``; plus the scalar lines printed next to them and mongoprobe's footer.

Parses text that tools printed, not their binary state. Three forms, all real (see
``samples/quantize/`` and how each file there was produced in its README):

1. DTrace ``quantize()`` (``printa``/END output; ``dtrace-mongo_time-*.txt``)::

       by_op:                                              <- title (optional)
         distribution in nsecs                             <- aggregation key (optional)
                  value  ------------- Distribution ------------- count
                  16384 |                                         0
                  32768 |@@@@@@@@@@@@@@@@@@@@@@@@@@@              304521
       <blank line>
         avg                                                           65688   <- scalar

   DTrace prints no aggregation names, so ``name`` is the latest *title*, a line that is
   a single word and a colon (``by_op:``) that the D script printed before ``printa``
   (mongoprobe's ``dtrace/*.d`` do), and ``""`` without one. ``key`` is the key line
   printed directly above the ``value`` header, ``""`` for an unkeyed aggregation. A row
   ``V`` is the bucket ``[V, 2V)``, ``0`` is ``[0, 1)``, ``-V`` is ``[-2V+1, -V+1)``.
   The empty rows DTrace adds around the data are kept (``count`` 0).
   Scalar lines (``printa`` of ``count``/``avg``/``sum``): an indented label, two or
   more spaces, an integer; ``name`` = title, ``key`` = label.

2. bpftrace ``hist()`` (``bpftrace-*.txt``, checked against bpftrace 0.17)::

       @read_ns[memfd:sealed-91, read]:
       [128, 256)             2 |@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@                  |
       [512K, 1M)             1 |@@@@@@@@@@@@@                                       |

   ``name`` is the map name without ``@`` (``""`` for ``@``), ``key`` the text between the
   brackets as printed (``"memfd:sealed-91, read"``). Bucket labels: ``[0]`` -> ``[0, 1)``,
   ``[1]`` -> ``[1, 2)``, ``[lo, hi)`` with K/M/G/T/P/E meaning powers of 1024, and
   ``(..., 0)`` (every negative value) -> ``[-2**63, 0)``. Scalar maps
   ``@count[find]: 123`` -> ``name`` "count", ``key`` "find". ``lhist`` is not supported.

3. bcc ``print_log2_hist`` (``bcc-*.txt``, bcc 0.26; both the narrow and the wide form
   bcc uses once values pass 2**32)::

       syscall = read                                      <- section (optional)
            nsecs               : count     distribution
                0 -> 1          : 0        |                                        |
              128 -> 255        : 5        |*************************               |

   A row ``a -> b`` is ``[a, b + 1)``; bcc's first row ``0 -> 1`` is ``[0, 2)`` (bcc's
   slot 1 holds both 0 and 1). With a section line ``LABEL = VALUE``, ``name`` is LABEL
   and ``key`` VALUE (a Python ``b'...'``/``'...'`` repr, as bcc prints keys without a
   ``section_print_fn``, is unquoted); without one ``name`` is the header word
   (``value``, ``nsecs``, ``usecs``...) and ``key`` is ``""``.

The probe footer (the same two lines from mongoprobe's bpftrace, bcc and DTrace tools)::

    requests: 10  replies: 9  stream replies: 0  no-reply (moreToCome): 1
    lost: unmatched replies 0, requests without reply 0, malformed headers 0, dropped events 0

``parse_scalars`` returns it as rows named ``requests``, ``replies``, ``stream_replies``,
``no_reply``, ``unmatched_replies``, ``requests_without_reply``, ``malformed``, ``dropped``
(``key`` ""), next to the scalar lines above.

Lines outside histograms that are none of these (banners such as ``Attaching 3
probes...``, a shell prompt) are skipped. Inside a histogram every line up to the next
blank line must be a row of that form; a line that starts like a row but is not one, rows
that do not follow each other (a line lost), a histogram header with no rows, or a file
with no histogram at all raise ``FormatError`` naming the file and line. Output of
periodic tools (one histogram per interval) gives one set of rows per printing, in order.

USAGE::

    from mongoprobe.formats.quantize import parse_quantize, parse_scalars
    df = parse_quantize("samples/quantize/dtrace-mongo_time-load.txt")
    scalars = parse_scalars("samples/quantize/dtrace-mongo_time-load.txt")
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import IO

import pandas as pd

from .errors import FormatError
from .source import read_input

HIST_COLUMNS = ("format", "name", "key", "lo", "hi", "count")
SCALAR_COLUMNS = ("name", "key", "value")
INT64_MIN = -(2**63)

# DTrace: "           value  ------------- Distribution ------------- count"
_DT_HEADER = re.compile(r"^\s*value\s+-+ Distribution -+\s+count\s*$")
_DT_ROW = re.compile(r"^\s*(-?\d+) \|([@ ]*?)\s*(\d+)\s*$")
_DT_ROWISH = re.compile(r"^\s*-?\d|\s\|")
# bpftrace: "@name[key]: " opens a hist; "@name[key]: 12" is a scalar.
_BT_MAP = re.compile(r"^@(\w*)(?:\[(.*)\])?:\s*$")
_BT_SCALAR = re.compile(r"^@(\w*)(?:\[(.*)\])?: (-?\d+)\s*$")
_BT_ROW = re.compile(r"^(\[[^\]\n]*\]|\[[^\]\n]*\)|\(\.\.\., 0\))\s+(\d+) \|([@ ]*)\|\s*$")
_BT_ROWISH = re.compile(r"^[\[(]")
_BT_LABEL = re.compile(r"^(\d+)([KMGTPE]?)$")
_SUFFIX = {"": 0, "K": 10, "M": 20, "G": 30, "T": 40, "P": 50, "E": 60}
# bcc: "     usecs               : count     distribution"
_BCC_HEADER = re.compile(r"^\s*(\S+)\s+: count\s+distribution\s*$")
_BCC_ROW = re.compile(r"^\s*(\d+) -> (\d+)\s+: (\d+)\s+\|([*+ ]*)\|\s*$")
_BCC_ROWISH = re.compile(r"^\s*\d|->")
_BCC_SECTION = re.compile(r"^(\S.*?) = (.*?)\s*$")
# titles and scalars
_TITLE = re.compile(r"^\s*(\w+):\s*$")
_DT_SCALAR = re.compile(r"^\s{2,}(\S.*?)\s{2,}(-?\d+)\s*$")
_FOOTER1 = re.compile(
    r"^\s*requests: (\d+)\s+replies: (\d+)\s+stream replies: (\d+)\s+"
    r"no-reply \(moreToCome\): (\d+)\s*$"
)
_FOOTER2 = re.compile(
    r"^\s*lost: unmatched replies (\d+), requests without reply (\d+), "
    r"malformed headers (\d+), dropped events (\d+)\s*$"
)
_FOOTER1_NAMES = ("requests", "replies", "stream_replies", "no_reply")
_FOOTER2_NAMES = ("unmatched_replies", "requests_without_reply", "malformed", "dropped")

_DT_ROW_EXPECTED = "a DTrace quantize row 'VALUE |@@@ COUNT' or a blank line"
_BT_ROW_EXPECTED = "a bpftrace hist row '[LO, HI)  COUNT |@@@|' or a blank line"
_BCC_ROW_EXPECTED = "a bcc log2 row 'LO -> HI : COUNT |***|' or a blank line"


@dataclass
class _Scan:
    source: str
    hist: list[tuple[str, str, str, int, int, int]] = field(default_factory=list)
    scalars: list[tuple[str, str, int]] = field(default_factory=list)


# --- input -------------------------------------------------------------------------------


# --- the scanner shared by parse_quantize and parse_scalars -------------------------------


def _pow2(v: int) -> bool:
    return v > 0 and v & (v - 1) == 0


def _check_next(sc: _Scan, n: int, line: str, prev_hi: int | None, lo: int, what: str) -> None:
    # Every printer lists consecutive buckets; a gap means a line was lost or edited.
    if prev_hi is not None and lo != prev_hi:
        raise FormatError(sc.source, n, f"{what} following the previous one", line)


def _dtrace_bucket(v: int) -> tuple[int, int] | None:
    if v == 0:
        return 0, 1
    if v > 0 and _pow2(v):
        return v, min(2 * v, 2**63 - 1)
    if v < 0 and _pow2(-v):
        return 2 * v + 1, v + 1
    return None


def _scan_dtrace(sc: _Scan, lines: list[str], i: int, name: str, key: str) -> int:
    """Rows after the header at lines[i]; returns the index after the block."""
    j, prev_hi, nrows = i + 1, None, 0
    while j < len(lines) and lines[j].strip():
        line = lines[j]
        m = _DT_ROW.match(line)
        if not m:
            if nrows and not _DT_ROWISH.search(line):
                break  # something else printed right after the table: the block ended
            raise FormatError(sc.source, j + 1, _DT_ROW_EXPECTED, line)
        if m[2].strip(" @"):
            raise FormatError(sc.source, j + 1, "a bar of '@' characters", line)
        b = _dtrace_bucket(int(m[1]))
        if b is None:
            raise FormatError(
                sc.source, j + 1,
                "a power-of-2 bucket value (lquantize/llquantize are not supported)", line,
            )  # fmt: skip
        _check_next(sc, j + 1, line, prev_hi, b[0], "the next power-of-2 bucket")
        sc.hist.append(("dtrace", name, key, b[0], b[1], int(m[3])))
        prev_hi, nrows, j = b[1], nrows + 1, j + 1
    if nrows == 0:
        raise FormatError(sc.source, j + 1, "quantize rows after the 'value ... count' header",
                          lines[j] if j < len(lines) else "")  # fmt: skip
    return j


def _bt_value(label: str, sc: _Scan, n: int, line: str) -> int:
    m = _BT_LABEL.match(label.strip())
    if not m:
        raise FormatError(sc.source, n, "a bucket bound like 512, 16K or 1M", line)
    return int(m[1]) << _SUFFIX[m[2]]


def _bt_bucket(label: str, sc: _Scan, n: int, line: str) -> tuple[int, int]:
    if label == "(..., 0)":
        return INT64_MIN, 0
    if label.endswith("]"):  # [0] or [1]: a single value
        v = _bt_value(label[1:-1], sc, n, line)
        if v not in (0, 1):
            raise FormatError(sc.source, n, "a single-value bucket [0] or [1]", line)
        return v, v + 1
    parts = label[1:-1].split(",")
    if len(parts) != 2:
        raise FormatError(sc.source, n, "a bucket '[LO, HI)'", line)
    lo, hi = (_bt_value(p, sc, n, line) for p in parts)
    if not (lo == 0 and hi == 1) and not (_pow2(lo) and hi == 2 * lo):
        raise FormatError(sc.source, n, "a log2 bucket [2^k, 2^(k+1)) (lhist is not supported)",
                          line)  # fmt: skip
    return lo, hi


def _scan_bpftrace(sc: _Scan, lines: list[str], i: int, name: str, key: str) -> int:
    j, prev_hi = i + 1, None
    while j < len(lines) and lines[j].strip():
        line = lines[j]
        m = _BT_ROW.match(line)
        if not m:
            if prev_hi is not None and not _BT_ROWISH.match(line):
                break
            raise FormatError(sc.source, j + 1, _BT_ROW_EXPECTED, line)
        lo, hi = _bt_bucket(m[1], sc, j + 1, line)
        if m[3].strip(" @"):
            raise FormatError(sc.source, j + 1, "a bar of '@' characters", line)
        _check_next(sc, j + 1, line, prev_hi, lo, "the next log2 bucket")
        sc.hist.append(("bpftrace", name, key, lo, hi, int(m[2])))
        prev_hi, j = hi, j + 1
    return j


def _scan_bcc(sc: _Scan, lines: list[str], i: int, name: str, key: str) -> int:
    j, prev_hi, nrows = i + 1, None, 0
    while j < len(lines) and lines[j].strip():
        line = lines[j]
        m = _BCC_ROW.match(line)
        if not m:
            if nrows and not _BCC_ROWISH.search(line):
                break  # bcc tools may print a summary line right after the table
            raise FormatError(sc.source, j + 1, _BCC_ROW_EXPECTED, line)
        lo, hi = int(m[1]), int(m[2]) + 1
        if not ((lo, hi) == (0, 2) or (_pow2(lo) and hi == 2 * lo)):
            raise FormatError(sc.source, j + 1, "a log2 row '2^k -> 2^(k+1)-1' "
                              "(print_linear_hist is not supported)", line)  # fmt: skip
        _check_next(sc, j + 1, line, prev_hi, lo, "the next log2 row")
        sc.hist.append(("bcc", name, key, lo, hi, int(m[3])))
        prev_hi, nrows, j = hi, nrows + 1, j + 1
    if nrows == 0:
        raise FormatError(sc.source, j + 1, "bcc log2 rows after the 'count  distribution' header",
                          lines[j] if j < len(lines) else "")  # fmt: skip
    return j


def _unrepr(s: str) -> str:
    # bcc prints section keys with %r when no section_print_fn is given: b'find', 'find'
    m = re.fullmatch(r"b?'(.*)'|b?\"(.*)\"", s)
    return s if not m else (m[1] if m[1] is not None else m[2])


def _scan(text: str, source: str) -> _Scan:
    sc = _Scan(source)
    lines = text.splitlines()
    title = ""
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        if _DT_HEADER.match(nxt) or _BCC_HEADER.match(nxt):
            # A key/section line: read by the header branch below, from lines[i - 1].
            # (A title line directly above a header is still a title.)
            if not _TITLE.match(line):
                i += 1
                continue
        if _DT_HEADER.match(line):
            above = lines[i - 1] if i > 0 else ""
            key = "" if not above.strip() or _TITLE.match(above) else above.strip()
            i = _scan_dtrace(sc, lines, i, title, key)
            continue
        if m := _BCC_HEADER.match(line):
            above = lines[i - 1] if i > 0 else ""
            if s := _BCC_SECTION.match(above.strip()):
                name, key = s[1], _unrepr(s[2])
            else:
                name, key = m[1], ""
            i = _scan_bcc(sc, lines, i, name, key)
            continue
        if (m := _BT_MAP.match(line)) and _BT_ROWISH.match(nxt):
            i = _scan_bpftrace(sc, lines, i, m[1], m[2] or "")
            continue
        if m := _FOOTER1.match(line):
            sc.scalars += [(n, "", int(v)) for n, v in zip(_FOOTER1_NAMES, m.groups())]
        elif m := _FOOTER2.match(line):
            sc.scalars += [(n, "", int(v)) for n, v in zip(_FOOTER2_NAMES, m.groups())]
        elif re.match(r"^\s*(requests|lost): ", line):
            raise FormatError(source, i + 1, "the probe footer 'requests: N  replies: N  "
                              "stream replies: N  no-reply (moreToCome): N' / 'lost: "
                              "unmatched replies N, requests without reply N, malformed "
                              "headers N, dropped events N'", line)  # fmt: skip
        elif m := _BT_SCALAR.match(line):
            sc.scalars.append((m[1], m[2] or "", int(m[3])))
        elif m := _TITLE.match(line):
            title = m[1]
        elif m := _DT_SCALAR.match(line):
            sc.scalars.append((title, m[1], int(m[2])))
        i += 1
    return sc


# --- public API --------------------------------------------------------------------------


def is_quantize(text: str) -> bool:
    """Cheap check: does ``text`` (its first 64 KiB) hold a printed log2 histogram?"""
    head = text[:65536]
    for line in head.splitlines():
        if _DT_HEADER.match(line) or _BCC_HEADER.match(line) or _BT_ROW.match(line):
            return True
    return False


def parse_quantize(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None
) -> pd.DataFrame:
    """Every printed log2 histogram in the input, one row per printed bucket.

    ``text_or_path``: the text itself, a path (``Path``, or any one-line ``str``: one line
    cannot hold a histogram) or an open text file. ``source`` names the input in errors.

    Columns (in this order):
        format  str    "dtrace", "bpftrace" or "bcc"
        name    str    aggregation/map name or title ("" when the output has none)
        key     str    the key as printed ("" for an unkeyed aggregation)
        lo      int64  inclusive lower bound of the bucket
        hi      int64  exclusive upper bound
        count   int64  values in the bucket (rows printed with 0 are kept)

    Raises ``FormatError`` (file, line, what was expected) on damaged input or when no
    histogram is found.
    """
    text, src = read_input(text_or_path, source)
    sc = _scan(text, src)
    if not sc.hist:
        n = len(text.splitlines())
        raise FormatError(src, max(n, 1), "a log2 histogram (DTrace quantize, bpftrace hist, "
                          "bcc print_log2_hist); none found before the end")  # fmt: skip
    df = pd.DataFrame(sc.hist, columns=list(HIST_COLUMNS))
    return df.astype({"lo": "int64", "hi": "int64", "count": "int64"})


def parse_scalars(
    text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None
) -> pd.DataFrame:
    """Scalar lines next to the histograms, and the probe footer, in input order.

    Columns: ``name`` str, ``key`` str, ``value`` int64. DTrace ``printa`` lines give
    ``name`` = current title and ``key`` = the label (``("", "avg", 65688)`` in the seed);
    bpftrace ``@count[find]: 12`` gives ``("count", "find", 12)``; footer lines give the
    eight counters named in the module docstring with ``key`` "". An input with none
    gives an empty frame; a damaged footer line raises ``FormatError``.
    """
    text, src = read_input(text_or_path, source)
    df = pd.DataFrame(_scan(text, src).scalars, columns=list(SCALAR_COLUMNS))
    return df.astype({"value": "int64"})


def to_histograms(df: pd.DataFrame) -> dict[tuple[str, str, str], pd.DataFrame]:
    """Split ``parse_quantize`` output into ``{(format, name, key): histogram}``, each a
    ``mongoprobe.model.log2_histogram`` frame (``lo``, ``hi``, ``count``; the same buckets summed when a
    periodic tool printed one key several times)."""
    out: dict[tuple[str, str, str], pd.DataFrame] = {}
    for k, g in df.groupby(["format", "name", "key"], sort=False):
        h = g.groupby(["lo", "hi"], sort=True, as_index=False)["count"].sum()
        out[(str(k[0]), str(k[1]), str(k[2]))] = h[["lo", "hi", "count"]].astype("int64")
    return out
