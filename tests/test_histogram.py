"""mongoprobe.model.log2_histogram: log2 bucketing, arithmetic, estimates and DTrace quantize text.

The rendering goldens are the real quantize blocks of Max Bruning's mongo_time.d runs
(samples/quantize/dtrace-mongo_time-*.txt, copied verbatim from the seed): parsed with
formats.quantize, rendered back, and compared row by row with the text DTrace printed.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mongoprobe.model import log2_histogram as H
from mongoprobe.formats.quantize import parse_quantize, to_histograms

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "quantize"
ROW = re.compile(r"^\s*(-?\d+) \|(@*)\s*(\d+)\s*$")


# --- bucketing ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "v, bucket",
    [(0, (0, 1)), (1, (1, 2)), (2, (2, 4)), (3, (2, 4)), (4, (4, 8)),
     (1023, (512, 1024)), (1024, (1024, 2048))],
)  # fmt: skip
def test_bucket_of_known_values(v: int, bucket: tuple[int, int]) -> None:
    assert H.bucket_of(v) == bucket
    h = H.from_values([v])
    assert h.to_dict("records") == [{"lo": bucket[0], "hi": bucket[1], "count": 1}]


def test_from_values_known_set() -> None:
    h = H.from_values([0, 1, 2, 3, 4, 1023, 1024])
    assert list(h.itertuples(index=False, name=None)) == [
        (0, 1, 1), (1, 2, 1), (2, 4, 2), (4, 8, 1), (512, 1024, 1), (1024, 2048, 1),
    ]  # fmt: skip
    assert [str(t) for t in h.dtypes] == ["int64"] * 3
    assert list(h.columns) == ["lo", "hi", "count"]


def test_from_values_exact_near_large_powers_of_two() -> None:
    # doubles cannot hold 2**53 + 1: the bucketing must not go through floats alone
    vals = np.array([2**53 - 1, 2**53, 2**53 + 1, 2**62, 2**63 - 1], dtype=np.int64)
    h = H.from_values(vals)
    assert list(h.itertuples(index=False, name=None)) == [
        (2**52, 2**53, 1), (2**53, 2**54, 2), (2**62, 2**63 - 1, 2),
    ]  # fmt: skip


def test_from_values_accepts_series_and_integral_floats() -> None:
    assert H.total(H.from_values(pd.Series([5, 6, 7]))) == 3
    assert H.from_values([4.0, 5.0])["lo"].tolist() == [4]
    assert H.from_values([]).empty


@pytest.mark.parametrize("bad", [[-1], [3, -5], [1.5], [float("nan")]])
def test_from_values_rejects_negative_and_non_integral(bad: list[float]) -> None:
    with pytest.raises(ValueError):
        H.from_values(bad)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**63 - 1), max_size=50),
       st.lists(st.integers(min_value=0, max_value=2**40), max_size=50))  # fmt: skip
def test_from_values_properties(a: list[int], b: list[int]) -> None:
    ha, hb = H.from_values(a), H.from_values(b)
    assert H.total(ha) == len(a)
    for v in a:  # every value lies in exactly one bucket, its own
        lo, hi = H.bucket_of(v)
        assert lo <= v and (v < hi or hi == 2**63 - 1)
        assert (ha["lo"] == lo).sum() == 1
    pd.testing.assert_frame_equal(H.merge(ha, hb), H.from_values(a + b))


# --- arithmetic and estimates --------------------------------------------------------------


HAND = H.from_buckets([(2, 4, 2), (4, 8, 6), (8, 16, 2)])  # 10 values


@pytest.mark.parametrize(
    "q, expected",
    [(0, 2), (10, 2), (20, 2), (50, 5), (80, 5), (90, 11), (100, 11)],
)
def test_percentile_is_the_middle_of_the_nearest_rank_bucket(q: float, expected: int) -> None:
    # p50: rank ceil(0.5 * 10) = 5 lies in [4, 8), whose integers 4..7 have the middle
    # 4 + (8 - 4 - 1) // 2 = 5; p90: rank 9 in [8, 16) -> 11 (wirefacts' one estimator)
    assert H.percentile(HAND, q) == expected
    # the exact max, when the probe counted it, caps the estimate
    assert H.percentile(HAND, q, max_ns=9) == min(expected, 9)


def test_percentile_skips_empty_buckets_and_rejects_bad_input() -> None:
    h = H.from_buckets([(0, 1, 0), (1, 2, 4), (2, 4, 0), (4, 8, 0), (8, 16, 4), (16, 32, 0)])
    assert H.percentile(h, 50) == 1  # rank 4: [1, 2) holds only 1
    assert H.percentile(h, 75) == 11  # rank 6: [8, 16)
    with pytest.raises(ValueError):
        H.percentile(H.empty(), 50)
    with pytest.raises(ValueError):
        H.percentile(HAND, 101)


def test_merge_total_and_incompatible_buckets() -> None:
    a = H.from_buckets([(1, 2, 3), (4, 8, 1)])
    b = H.from_buckets([(4, 8, 2), (16, 32, 5)])
    m = H.merge(a, b)
    assert list(m.itertuples(index=False, name=None)) == [(1, 2, 3), (4, 8, 3), (16, 32, 5)]
    assert H.total(m) == H.total(a) + H.total(b) == 11
    bcc_like = H.from_buckets([(0, 2, 1)])  # bcc's first slot holds 0 and 1
    with pytest.raises(ValueError, match="overlap"):
        H.merge(a, bcc_like)


def test_validate_rejects_malformed_frames() -> None:
    with pytest.raises(ValueError):
        H.from_buckets([(4, 2, 1)])
    with pytest.raises(ValueError):
        H.from_buckets([(1, 2, -1)])
    with pytest.raises(ValueError):
        H.validate(pd.DataFrame({"lo": [1.0], "hi": [2.0], "count": [1.0]}))


def test_json_buckets_round_trip_keeps_only_non_empty() -> None:
    h = H.from_buckets([(16384, 32768, 0), (32768, 65536, 304521), (65536, 131072, 133288)])
    js = H.to_json_buckets(h)
    assert js == [
        {"lo_ns": 32768, "hi_ns": 65536, "count": 304521},
        {"lo_ns": 65536, "hi_ns": 131072, "count": 133288},
    ]
    assert all(type(v) is int for b in js for v in b.values())
    back = H.from_json_buckets(js)
    pd.testing.assert_frame_equal(back, h[h["count"] > 0].reset_index(drop=True))


def test_summary_mean_needs_the_exact_sum() -> None:
    s = H.summary(HAND)
    assert s["count"] == 10 and s["avg_ns"] is None
    # without the exact max: the largest value the last bucket [8, 16) holds
    assert s["p50_ns"] == 5 and s["max_ns"] == 15
    assert H.summary(HAND, exact_sum=61)["avg_ns"] == pytest.approx(6.1)
    assert H.summary(H.empty())["count"] == 0


# --- DTrace quantize rendering against the real seed output --------------------------------


def _seed_block(path: Path) -> list[str]:
    """The quantize block of a seed transcript: key line, header and rows, as printed."""
    lines = path.read_text().splitlines()
    start = next(i for i, s in enumerate(lines) if "Distribution" in s) - 1
    end = next(i for i in range(start, len(lines)) if not lines[i].strip())
    return lines[start:end]


def _rows(lines: list[str]) -> list[tuple[int, int, int]]:
    """(value, number of '@', count) of every row."""
    out = []
    for s in lines:
        if m := ROW.match(s):
            out.append((int(m[1]), len(m[2]), int(m[3])))
    return out


@pytest.mark.parametrize("case", ["load", "run"])
def test_render_matches_the_real_dtrace_block(case: str) -> None:
    path = SAMPLES / f"dtrace-mongo_time-{case}.txt"
    seed = _seed_block(path)
    ((_, h),) = to_histograms(parse_quantize(path)).items()
    out = H.render_quantize(h).splitlines()  # default title: "distribution in nsecs"
    assert _rows(out) == _rows(seed)  # values, bar lengths and counts, row by row
    assert len(_rows(out)) == len(seed) - 2
    # The text itself: the blog indents every line by two spaces and trims trailing
    # blanks; one row of the load run also lost its bar alignment in the blog's copy.
    dedented = [s[2:].rstrip() for s in seed]
    if case == "run":
        assert out == dedented
    else:
        assert out[:2] == dedented[:2]
        assert [re.sub(r" +", " ", s) for s in out] == [re.sub(r" +", " ", s) for s in dedented]


def test_render_round_trips_through_the_parser() -> None:
    h = H.from_values([0, 0, 1, 5, 6, 7, 900, 70_000])
    text = "by_op:\n" + H.render_quantize(h, title="OP_MSG")
    df = parse_quantize(text)
    assert set(zip(df["format"], df["name"], df["key"])) == {("dtrace", "by_op", "OP_MSG")}
    # DTrace's leading "-1" row (values below 0) parses as the bucket [-1, 0)
    assert df.iloc[0][["lo", "hi", "count"]].tolist() == [-1, 0, 0]
    got = df[df["count"] > 0][["lo", "hi", "count"]].reset_index(drop=True)
    pd.testing.assert_frame_equal(got, h)


def test_render_details() -> None:
    h = H.from_buckets([(1, 2, 1)])
    lines = H.render_quantize(h, title="", unit="us").splitlines()
    assert lines[0].strip().startswith("value")  # no title line
    assert [r[0] for r in _rows(lines)] == [0, 1, 2]  # one empty row each side
    assert H.render_quantize(h, unit="us").splitlines()[0] == "  distribution in usecs"
    assert H.render_quantize(H.empty()).count("\n") == 2  # title and header only


def test_render_stays_under_80_columns() -> None:
    h = H.from_buckets([(0, 1, 10**15), (2**52, 2**53, 1), (2**62, 2**63 - 1, 10**18)])
    text = H.render_quantize(h)
    assert max(len(s) for s in text.splitlines()) < 80


def test_render_refuses_non_log2_buckets() -> None:
    with pytest.raises(ValueError, match="log2"):
        H.render_quantize(H.from_buckets([(0, 2, 5)]))


def _bcc_tool():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "mongolatency", Path(__file__).resolve().parents[1] / "probes" / "mongolatency.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)               # defines functions; main() is not run
    return tool


def test_bcc_tool_uses_the_analyzers_wirefacts():
    """probes/mongolatency.py bounds its kernel's log-linear buckets and computes its
    percentiles with the analyzer's own module (mongoprobe.wire.facts), not a copy."""
    from mongoprobe.model import loglinear_buckets as loglinear
    from mongoprobe.wire import facts as wirefacts

    tool = _bcc_tool()
    assert tool.wf is wirefacts          # the analyzer had imported it: the same module
    assert (tool.SUB_BITS, tool.NB) == (loglinear.SUB_BITS, 1024)
    assert tool.bucket_bounds is loglinear.bounds is wirefacts.bounds
    assert not hasattr(tool, "pct_hist") and not hasattr(tool, "CODE_NAMES")


def test_bcc_tool_adds_up_the_cpus_and_the_slices():
    """The per-CPU values of one kernel key (slice, command, opcode) add up: counts and
    sums and buckets and failed replies, the largest max, with the preallocated spill
    map's entry for the same key (where a request goes when the kernel could not
    allocate) and lat_cache's copies of it (a per-CPU array slot); the failed replies' codes come from their own map; a slice is read once
    it is over, then deleted."""
    from types import SimpleNamespace as NS

    tool = _bcc_tool()

    def val(count, sum_ns, max_ns, noreply, buckets, errors=0):
        h = (tool.ct.c_uint * tool.NB)()
        for b, n in buckets.items():
            h[b] = n
        return NS(count=count, sum_ns=sum_ns, max_ns=max_ns, noreply=noreply, hist=h,
                  errors=errors)

    from collections import namedtuple
    Key, Name = namedtuple("Key", "slice name op fd"), namedtuple("Name", "c")   # bcc's
    EKey = namedtuple("EKey", "slice name op code")

    class Table(dict):
        pass

    old = Key(10, Name(b"find"), 2013, 0)
    now = Key(2**40, Name(b"find"), 2013, 0)          # a second far in the future
    t = Table({old: [val(3, 3000, 1500, 0, {400: 3}, 1),
                     val(2, 5000, 2900, 1, {400: 1, 401: 1}, 2)],
               now: [val(1, 10, 10, 0, {10: 1})]})
    spill = Table({old: [val(0, 0, 0, 0, {}), val(1, 4000, 4000, 0, {420: 1}, 1)]})
    e = Table({EKey(10, Name(b"find"), 2013, 59): NS(value=3),
               EKey(10, Name(b"find"), 2013, -1): NS(value=1),
               EKey(2**40, Name(b"find"), 2013, 26): NS(value=1)})
    class Cache(dict):                      # lat_cache: per-CPU slots, zeroed when read
        def Leaf(self):
            return None

        def items(self):
            return [(tool.ct.c_int(i), v) for i, v in dict.items(self)]

        def __setitem__(self, k, v):
            dict.__setitem__(self, k.value if hasattr(k, "value") else k, v)

    free = NS(k=Key(0, Name(b""), 0, 0), v=val(0, 0, 0, 0, {}))
    # slice 10's set (10 % 4) at second 1000: a copy of the same key on CPU 1
    cache = Cache({(10 % tool.CACHE_SETS) * tool.CACHE_WAYS + 5:
                   [free, NS(k=old, v=val(1, 500, 500, 0, {380: 1}))]})
    got = tool.take_slices({"lat": t, "lat_spill": spill, "lat_cache": cache, "errs": e},
                           now=1000 * tool.SLICE_NS)
    assert list(got) == [10]
    a = got[10][("cmd", ("find", "OP_MSG"))]
    assert (a.count, a.sum_ns, a.max_ns, a.noreply, a.hist) == (
        7, 12500, 4000, 1, {380: 1, 400: 4, 401: 1, 420: 1})
    assert list(cache.values()) == [None]       # zeroed
    assert (a.errors, a.codes) == (4, {59: 3, -1: 1})
    assert list(t) == [now]                     # read once, deleted; the open one stays
    assert list(spill) == []
    assert list(e) == [EKey(2**40, Name(b"find"), 2013, 26)]
