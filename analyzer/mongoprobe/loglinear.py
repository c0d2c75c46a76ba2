"""Log-linear latency buckets: 32 sub-buckets per power of two, so any percentile read
from the buckets is within 1.6% of the true one, with a bounded number of buckets.

The rule (one definition; the probes compute the same index in the kernel):

    v < 32 ns          bucket v, exact                      (buckets 0..31)
    v >= 32 ns         e = floor(log2 v); s = (v >> (e - 5)) - 32   (0..31)
                       bucket 32 * (e - 4) + s              (32, 33, ...)

Bucket ``b >= 32`` holds ``[lo, hi]`` with ``e = b // 32 + 4``, ``s = b % 32``,
``lo = (32 + s) << (e - 5)``, ``hi = ((33 + s) << (e - 5)) - 1``: its width is at most
1/32 of ``lo``, so its midpoint is within 1/64 (1.56%) of every value in it. A value is
represented by its bucket's midpoint; a nearest-rank percentile from exact bucket counts
lands in the bucket of the true sample of that rank, hence the bound. 2^40 ns (18
minutes) is bucket 1,152: a command's histogram never has more entries than that.

A histogram is a mapping ``{bucket: count}`` (or parallel arrays); :func:`percentile`
and :func:`summary` read it, :func:`index` vectorises the rule for numpy arrays.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

SUB_BITS = 5
SUB = 1 << SUB_BITS          # sub-buckets per power of two
MAX_ERROR = 1 / (2 * SUB)    # a bucket midpoint's largest relative error


def bucket(v: int) -> int:
    """The bucket of a latency ``v`` (integer nanoseconds, >= 0)."""
    if v < SUB:
        return max(int(v), 0)
    e = int(v).bit_length() - 1
    return SUB * (e - SUB_BITS + 1) + (int(v) >> (e - SUB_BITS)) - SUB


def index(values) -> np.ndarray:
    """:func:`bucket` of every value of an integer array (int64 buckets)."""
    v = np.asarray(values, dtype=np.int64)
    shape, v = v.shape, v.reshape(-1)
    if v.size and v.min() < 0:
        v = np.maximum(v, 0)
    # Below 2**53 an int64 is exact as a float64, whose bits hold the exponent (plus
    # 1023) and under it the five mantissa bits after the leading one: shifted down,
    # 32 * (e + 1023) + s, the bucket plus a constant. Several times faster than
    # finding e with log2 and shifting v by it.
    out = v.astype(np.float64).view(np.int64) >> (52 - SUB_BITS)
    out -= (1023 + SUB_BITS - 1) * SUB
    np.copyto(out, v, where=v < SUB)
    if v.size and v.max() >= 1 << 53:           # the float rounded: the exact rule
        big = v >= 1 << 53
        out[big] = [bucket(int(x)) for x in v[big]]
    return out.reshape(shape)


def bounds(b: int) -> tuple[int, int]:
    """``(lo, hi)``, the smallest and largest value of bucket ``b`` (inclusive)."""
    if b < SUB:
        return b, b
    e, s = b // SUB + SUB_BITS - 1, b % SUB
    return (SUB + s) << (e - SUB_BITS), ((SUB + s + 1) << (e - SUB_BITS)) - 1


def midpoint(b: int) -> float:
    lo, hi = bounds(b)
    return (lo + hi) / 2


def _sorted(hist: Mapping[int, int]) -> tuple[list[int], np.ndarray]:
    keys = sorted(k for k, c in hist.items() if c > 0)
    return keys, np.cumsum([hist[k] for k in keys], dtype=np.int64)


def percentile(hist: Mapping[int, int], q: float) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) as its bucket's midpoint; NaN
    for an empty histogram."""
    keys, cum = _sorted(hist)
    if not keys:
        return math.nan
    rank = max(math.ceil(q / 100 * int(cum[-1])), 1)
    return midpoint(keys[int(np.searchsorted(cum, rank))])


def summary(hist: Mapping[int, int], qs: Iterable[float] = (50, 95, 99)) -> dict:
    """``{"count", "p50", "p95", "p99", "max"}`` of a histogram (``max``: the largest
    non-empty bucket's upper bound, within 1/32 of the true maximum)."""
    keys, cum = _sorted(hist)
    out: dict = {"count": int(cum[-1]) if keys else 0}
    for q in qs:
        out[f"p{q:g}"] = percentile(hist, q)
    out["max"] = float(bounds(keys[-1])[1]) if keys else math.nan
    return out


def merge(hists: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """The sum of several histograms (intervals, connections)."""
    out: dict[int, int] = {}
    for h in hists:
        for k, c in h.items():
            out[k] = out.get(k, 0) + c
    return out
