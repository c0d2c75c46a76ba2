"""The log-linear bucket rule (mongoprobe.model.loglinear_buckets): contiguous buckets, every value
inside its bucket's bounds, the vectorised index equal to the scalar rule, and
percentiles from bucket counts within 1.6% of the exact nearest-rank percentile."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mongoprobe.model import loglinear_buckets as ll


def test_buckets_are_half_open_contiguous_and_hold_their_values():
    prev_hi = 0
    for b in range(0, 40 * ll.SUB):
        lo, hi = ll.bounds(b)                            # b holds lo <= v < hi
        assert lo == prev_hi and hi > lo
        assert ll.bucket(lo) == b and ll.bucket(hi - 1) == b and ll.bucket(hi) == b + 1
        assert (hi - lo) <= max(1, lo / ll.SUB)          # width at most lo/32
        prev_hi = hi
    assert ll.bucket(2 ** 40) == 1152


def _kernel_bucket(lat: int) -> int:
    """probes/mongo_wire.bt.in's bucket, step by step (floor(log2) by halving, then the
    shift that truncates: a bucket ends where the next begins); mongo_wire.h's is the
    same formula with bpf_log2l."""
    v = lat | 32
    s = (v > 4294967295) << 5; e = s; v >>= s            # noqa: E702
    s = (v > 65535) << 4; e += s; v >>= s                # noqa: E702
    s = (v > 255) << 3; e += s; v >>= s                  # noqa: E702
    s = (v > 15) << 2; e += s; v >>= s                   # noqa: E702
    s = (v > 3) << 1; e += s; v >>= s                    # noqa: E702
    e += v > 1
    bk = lat if lat < 32 else 32 * (e - 4) + (lat >> (e - 5)) - 32
    return min(bk, 1023)


def test_the_kernels_buckets_are_the_half_open_bounds():
    for b in range(0, 1023):
        lo, hi = ll.bounds(b)
        assert [_kernel_bucket(v) for v in (lo, hi - 1, hi)] == [b, b, b + 1], b
        assert ll.bucket(lo) == ll.bucket(hi - 1) == b


@given(st.lists(st.integers(min_value=0, max_value=2 ** 50), min_size=1, max_size=200))
def test_vectorised_index_is_the_rule(values):
    assert ll.index(values).tolist() == [ll.bucket(v) for v in values]


def test_index_at_powers_of_two_and_their_neighbours():
    vals = [v + d for k in range(1, 62) for v in [2 ** k] for d in (-1, 0, 1)]
    assert ll.index(vals).tolist() == [ll.bucket(v) for v in vals]


def _exact(values: np.ndarray, q: float) -> float:
    s = np.sort(values)
    return float(s[max(math.ceil(q / 100 * len(s)), 1) - 1])


@settings(max_examples=200)
@given(st.lists(st.integers(min_value=1, max_value=10 ** 10), min_size=1, max_size=500),
       st.sampled_from([1, 50, 90, 95, 99, 99.9, 100]))
def test_percentile_within_the_bound_of_the_exact_one(values, q):
    v = np.array(values, dtype=np.int64)
    b = ll.index(v)
    hist = dict(zip(*np.unique(b, return_counts=True)))
    exact, est = _exact(v, q), ll.percentile(hist, q)
    # the bucket's middle integer is within width/2 <= lo/64 of each of its values
    assert abs(est - exact) <= ll.MAX_ERROR * exact
    # capped by the exact max, which may only bring it closer
    assert abs(ll.percentile(hist, q, max_ns=int(v.max())) - exact) <= abs(est - exact)


def test_summary_and_merge():
    a = {ll.bucket(1000): 3, ll.bucket(5000): 1}
    b = {ll.bucket(1000): 1}
    m = ll.merge([a, b])
    s = ll.summary(m)
    assert s["count"] == 5 and abs(s["p50"] - 1000) <= 16 and abs(s["max"] - 5000) <= 5000 / 32
    assert ll.summary(m, max_ns=5000)["max"] == 5000
    assert math.isnan(ll.summary({})["p50"]) and ll.summary({})["count"] == 0
