"""Power-of-2 (log2) histograms: the shape DTrace ``quantize()``, bpftrace ``hist()`` and
bcc ``print_log2_hist`` all print, as a small typed pandas DataFrame.

A histogram is a DataFrame with exactly these columns, one row per bucket, sorted by
``lo``, buckets never overlapping:

    lo     int64  inclusive lower bound of the bucket
    hi     int64  exclusive upper bound: the bucket holds lo <= v < hi
    count  int64  number of values in the bucket (>= 0; zero rows are allowed)

The buckets made here are the DTrace/bpftrace ones: ``[0, 1)`` for the value 0, then
``[1, 2)``, ``[2, 4)``, ``[4, 8)`` ... ``[2**k, 2**(k+1))``. (The last one,
``[2**62, 2**63)``, is stored with ``hi = 2**63 - 1`` because int64 stops there.)
Parsed histograms may carry other buckets (bcc merges 0 and 1 into ``[0, 2)``,
bpftrace's ``(..., 0)`` holds every negative value); ``merge``, ``total`` and
``percentile`` work on any such buckets, ``render_quantize`` needs log2 ones.

A histogram does not know the mean: the buckets only bound each value. Functions that
report one (``summary``) take the exact sum, which the probes count next to the
histogram (DTrace ``avg()``, bpftrace ``sum()``); without it the mean is ``None``.

Example (the printed histogram is what ``render_quantize`` returns)::

    h = from_values([0, 1, 3, 1023, 1024])
    to_json_buckets(h)[:2]  # [{'lo_ns': 0, 'hi_ns': 1, 'count': 1}, {'lo_ns': 1, ...}]
    print(render_quantize(h))
      distribution in nsecs
               value  ------------- Distribution ------------- count
                  -1 |                                         0
                   0 |@@@@@@@@                                 1
                   1 |@@@@@@@@                                 1
                   2 |@@@@@@@@                                 1
                   4 |                                         0
    ...
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from mongoprobe.wire import facts as wirefacts

COLUMNS = ("lo", "hi", "count")
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_BAR = 40  # DTrace's bar width: 40 '@' for 100 % of the total
_UNIT_WORDS = {"ns": "nsecs", "us": "usecs", "ms": "msecs", "s": "secs"}


# --- construction and checks ------------------------------------------------------------


def empty() -> pd.DataFrame:
    """A histogram with no buckets."""
    return pd.DataFrame({c: pd.Series([], dtype="int64") for c in COLUMNS})


def from_buckets(rows: Iterable[tuple[int, int, int]]) -> pd.DataFrame:
    """Build (and check) a histogram from ``(lo, hi, count)`` triples in any order."""
    rows = list(rows)
    if not rows:
        return empty()
    # numpy, not DataFrame(rows).astype().sort_values(): a summary of 10,000
    # connections builds 10,000 histograms, and pandas' per-call cost was a minute
    a = np.array(rows, dtype=np.int64).reshape(-1, 3)
    return from_sorted(a[np.argsort(a[:, 0], kind="stable")])


def from_sorted(a: np.ndarray) -> pd.DataFrame:
    """A histogram from an int64 array of ``(lo, hi, count)`` rows sorted by ``lo``,
    checked as ``validate`` checks a frame, on the array (reading a frame's columns
    costs more than the checks)."""
    _check_buckets(a[:, 0], a[:, 1], a[:, 2])
    return pd.DataFrame(a, columns=list(COLUMNS))


def validate(h: pd.DataFrame) -> pd.DataFrame:
    """Return ``h`` if it is a well-formed histogram, else raise ValueError saying why."""
    if list(h.columns) != list(COLUMNS):
        raise ValueError(f"a histogram has columns {list(COLUMNS)}, not {list(h.columns)}")
    cols = [h[c].to_numpy() for c in COLUMNS]    # each column read once
    for c, a in zip(COLUMNS, cols):
        if a.dtype != np.int64:
            raise ValueError(f"histogram column {c!r} must be int64, not {h[c].dtype}")
    _check_buckets(*cols)
    return h


def _check_buckets(lo: np.ndarray, hi: np.ndarray, count: np.ndarray) -> None:
    if (lo >= hi).any():
        raise ValueError("histogram bucket with lo >= hi")
    if (count < 0).any():
        raise ValueError("histogram bucket with a negative count")
    # Sorted and non-overlapping: each bucket starts at or after the previous one's end.
    if len(lo) > 1 and (lo[1:] < hi[:-1]).any():
        raise ValueError("histogram buckets overlap or are not sorted by lo")


def bucket_of(v: int) -> tuple[int, int]:
    """The log2 bucket ``(lo, hi)`` that holds the non-negative integer ``v``."""
    v = int(v)
    if v < 0:
        raise ValueError(f"log2 histograms hold non-negative values, not {v}")
    if v == 0:
        return 0, 1
    k = v.bit_length() - 1  # floor(log2 v), exact for any int
    return 1 << k, min(1 << (k + 1), INT64_MAX)


def from_values(values: Iterable[int] | np.ndarray | pd.Series) -> pd.DataFrame:
    """Bucket integer values like bpftrace ``hist()`` / DTrace ``quantize()``.

    ``v >= 1`` goes to ``[2**k, 2**(k+1))`` with ``k = floor(log2 v)``; ``0`` goes to
    ``[0, 1)``. Negative or non-integral values raise ValueError. Only non-empty buckets
    are returned (``render_quantize`` fills the gaps).
    """
    arr = np.asarray(values if not isinstance(values, pd.Series) else values.to_numpy())
    if arr.size == 0:
        return empty()
    if arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.floor(arr)).any():
            raise ValueError("log2 histograms hold integers; got non-integral values")
        arr = arr.astype(np.int64)
    elif arr.dtype.kind not in "iu":
        arr = np.asarray([int(v) for v in arr.ravel()], dtype=np.int64)
    arr = arr.ravel()
    if arr.dtype.kind == "i" and (arr < 0).any():
        raise ValueError(f"log2 histograms hold non-negative values, not {int(arr.min())}")
    if arr.dtype.kind == "u" and (arr > INT64_MAX).any():
        raise ValueError("log2 histogram values must fit in int64")
    u = arr.astype(np.uint64)
    pos = u > 0
    # floor(log2 v) from the float, then corrected: doubles round large ints, so the
    # estimate can be one off near a power of two.
    k = np.zeros(u.shape, dtype=np.uint64)
    k[pos] = np.floor(np.log2(u[pos].astype(np.float64))).astype(np.uint64)
    k[pos] -= (np.left_shift(np.uint64(1), k[pos]) > u[pos]).astype(np.uint64)
    nxt = k[pos] + np.uint64(1)
    k[pos] += (np.left_shift(np.uint64(1), nxt) <= u[pos]).astype(np.uint64) * (nxt < 64)
    lo = np.where(pos, np.left_shift(np.uint64(1), k), np.uint64(0))
    los, counts = np.unique(lo, return_counts=True)
    rows = []
    for b, c in zip(los.tolist(), counts.tolist()):
        lo_b, hi_b = bucket_of(b)
        rows.append((lo_b, hi_b, c))
    return from_buckets(rows)


def from_json_buckets(buckets: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """Inverse of ``to_json_buckets``: ``[{"lo_ns", "hi_ns", "count"}, ...]`` -> histogram."""
    return from_buckets((int(b["lo_ns"]), int(b["hi_ns"]), int(b["count"])) for b in buckets)


def to_json_buckets(h: pd.DataFrame) -> list[dict[str, int]]:
    """Non-empty buckets as ``[{"lo_ns", "hi_ns", "count"}]`` (the ``latency --json`` "hist")."""
    validate(h)
    lo, hi, count = (h[c].to_numpy() for c in COLUMNS)
    nz = count > 0          # (numpy: per-row pandas indexing is slow at 10,000 groups)
    return [
        {"lo_ns": a, "hi_ns": b, "count": c}
        for a, b, c in zip(lo[nz].tolist(), hi[nz].tolist(), count[nz].tolist())
    ]


# --- arithmetic ---------------------------------------------------------------------------


def merge(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Sum two histograms bucket by bucket (the same buckets add; others are kept).

    Raises ValueError if the two use incompatible buckets (e.g. bcc's ``[0, 2)`` with
    ``[1, 2)``), since the sum would have overlapping buckets.
    """
    validate(a)
    validate(b)
    both = pd.concat([a, b], ignore_index=True)
    if both.empty:
        return empty()
    s = both.groupby(["lo", "hi"], sort=True, as_index=False)["count"].sum()
    return validate(s[list(COLUMNS)].astype("int64").reset_index(drop=True))


def total(h: pd.DataFrame) -> int:
    """Number of values in the histogram."""
    return int(validate(h)["count"].sum())


def _rows(h: pd.DataFrame) -> list[tuple[int, int, int]]:
    nz = validate(h)[h["count"] > 0]
    return list(zip(nz["lo"].tolist(), nz["hi"].tolist(), nz["count"].tolist()))


def percentile(h: pd.DataFrame, q: float, max_ns: int | None = None) -> int:
    """The nearest-rank q-th percentile (0 <= q <= 100; 0: the smallest) from the
    buckets: the middle integer of the bucket holding the value of that rank, at most
    ``max_ns`` (``mongoprobe.wire.facts``: the one statistic of every view). An
    *estimate*: within half the bucket's width, 1.6% for log-linear buckets, up to 50%
    for log2 ones. Exact percentiles come from per-request events (``--events``), not
    from histograms. Raises ValueError on an empty histogram.
    """
    if not 0 <= q <= 100:
        raise ValueError(f"percentile q must be within [0, 100], not {q}")
    rows = _rows(h)
    if not rows:
        raise ValueError("percentile of an empty histogram")
    # bpftrace's (..., 0) holds every negative value: unbounded below, its bound stands
    rows = [(hi - 1 if lo == INT64_MIN else lo, hi, c) for lo, hi, c in rows]
    return wirefacts.bucket_percentile(rows, q, max_ns)


def summary(h: pd.DataFrame, exact_sum: int | None = None,
            exact_max: int | None = None) -> dict[str, Any]:
    """``{"count", "avg_ns", "p50_ns", "p95_ns", "p99_ns", "max_ns", "hist"}`` as in
    ``latency --json`` (``wirefacts.stats``).

    ``avg_ns`` needs ``exact_sum`` (the sum of all values, counted by the probe): buckets
    cannot give it, so it is ``None`` without. The percentiles are ``percentile``
    estimates, and ``max_ns`` is ``exact_max``, or without it the largest value the
    last non-empty bucket holds (``hi - 1``).
    """
    d = wirefacts.stats(_rows(h), exact_sum, exact_max)
    return {**d, "hist": to_json_buckets(h)}


# --- DTrace quantize text -----------------------------------------------------------------


def _is_log2_bucket(lo: int, hi: int) -> bool:
    if lo == 0:
        return hi == 1
    return lo > 0 and lo & (lo - 1) == 0 and hi == min(2 * lo, INT64_MAX)


def _next_bucket_value(v: int) -> int:
    return 1 if v <= 0 else 2 * v


def render_quantize(h: pd.DataFrame, title: str | None = None, unit: str | None = "ns") -> str:
    """Render ``h`` as DTrace prints a ``quantize()`` aggregation.

    ``title`` is printed above the table as DTrace prints an aggregation key (two spaces
    of indent); ``None`` gives ``distribution in nsecs`` (from ``unit``: ns, us, ms, s),
    ``""`` no title line. Rows run from one empty bucket below the first non-empty one
    to one empty bucket above the last (below ``0`` that is DTrace's ``-1``), with the
    empty buckets in between, exactly as DTrace does; the bar is 40 ``@`` for the whole
    total, rounded to the nearest ``@`` (DTrace's ``count * 40 / total + 0.5``).
    Trailing spaces are trimmed. Lines stay under 80 columns: values of 17 digits or
    more (above 2**53 ns, 104 days) or counts of 20 digits narrow the bar to fit.
    Raises ValueError for buckets that are not log2 ones (bcc's ``[0, 2)``, negatives).
    """
    validate(h)
    lines = []
    if title is None and unit:
        title = f"distribution in {_UNIT_WORDS.get(unit, unit)}"
    if title:
        lines.append(f"  {title}")
    lines.append(f"{'value':>16} {'------------- Distribution -------------':>41} count")
    nz = h[h["count"] > 0]
    counts: dict[int, int] = {}
    for lo, hi, c in zip(nz["lo"].tolist(), nz["hi"].tolist(), nz["count"].tolist()):
        if not _is_log2_bucket(lo, hi):
            raise ValueError(f"render_quantize needs log2 buckets, not [{lo}, {hi})")
        counts[lo] = c
    if not counts:
        return "\n".join(lines) + "\n"
    tot = sum(counts.values())
    first, last = min(counts), max(counts)
    v = -1 if first == 0 else first // 2  # the empty row DTrace prints before the first
    end = _next_bucket_value(last) if last < 2**62 else last  # and the one after the last
    # DTrace's 40-column bar, narrowed only if huge values or counts would pass 79 columns
    vw = max(16, len(str(end)), len(str(v)))
    bar = min(_BAR, 79 - vw - 3 - len(str(max(counts.values()))))
    while True:
        c = counts.get(v, 0)
        # round-half-up of c*bar/total in exact integer arithmetic
        depth = (2 * c * bar + tot) // (2 * tot)
        lines.append(f"{v:>{vw}} |{'@' * depth}{' ' * (bar - depth)} {c}")
        if v >= end:
            break
        v = 0 if v == -1 else _next_bucket_value(v)
    return "\n".join(lines) + "\n"
