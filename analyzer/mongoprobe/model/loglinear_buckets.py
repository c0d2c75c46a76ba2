"""Log-linear latency buckets: 32 sub-buckets per power of two, so any percentile read
from the buckets is within 1.6% of the true one, with a bounded number of buckets.

The rule, the bucket bounds and the statistic are ``mongoprobe.wire.facts``' (shared
with the bcc tools and computed the same way by the probes in the kernel): bucket ``b``
holds ``lo <= v < hi``; values below 32 ns are their own bucket; above, each bucket is
at most 1/32 of its ``lo`` wide, so its middle integer is within 1/64 (1.56%) of every
value in it, and a nearest-rank percentile from exact bucket counts lands in the bucket
of the true sample of that rank: hence the bound. 2^40 ns (18 minutes) is bucket
1,152: a command's histogram never has more entries than that.

A histogram is a mapping ``{bucket: count}``; :func:`percentile` and :func:`summary`
read it, :func:`index` vectorises the rule for numpy arrays.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping

import numpy as np

from mongoprobe.wire import facts as wirefacts
from mongoprobe.wire.facts import MAX_ERROR, SUB, SUB_BITS, bounds, bucket  # noqa: F401 (the API)


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


def midpoint(b: int) -> int:
    """The estimate of a value in bucket ``b``: its middle integer (``wirefacts``)."""
    return wirefacts.middle(*bounds(b))


def percentile(hist: Mapping[int, int], q: float, max_ns: int | None = None) -> float:
    """The nearest-rank ``q`` percentile (0 < q <= 100) as its bucket's middle, at most
    ``max_ns``; NaN for an empty histogram."""
    v = wirefacts.bucket_percentile(wirefacts.hist_buckets(hist), q, max_ns)
    return math.nan if v is None else v


def summary(hist: Mapping[int, int], qs: Iterable[float] = (50, 95, 99),
            max_ns: int | None = None) -> dict:
    """``{"count", "p50", "p95", "p99", "max"}`` of a histogram (``wirefacts.stats``;
    ``max``: ``max_ns`` if known, else the largest value the last bucket holds)."""
    d = wirefacts.stats(wirefacts.hist_buckets(hist), max_ns=max_ns, quantiles=tuple(qs))
    out: dict = {"count": d["count"]}
    for q in qs:
        v = d[f"p{q:g}_ns"]
        out[f"p{q:g}"] = math.nan if v is None else v
    out["max"] = math.nan if d["max_ns"] is None else d["max_ns"]
    return out


def merge(hists: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """The sum of several histograms (intervals, connections)."""
    out: dict[int, int] = {}
    for h in hists:
        for k, c in h.items():
            out[k] = out.get(k, 0) + c
    return out
