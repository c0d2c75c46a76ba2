"""mongoprobe.model.latencies: per-request events and the per-interval histograms made from
them give the same windows -- counts, averages and maxima exactly, percentiles within
the log-linear bound, rates and per-second counts exactly on interval edges."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mongoprobe.model import latencies, loglinear_buckets as loglinear
from mongoprobe.formats import wire_events

T0 = 1_795_000_000.0


def _events(n: int = 20000, seconds: int = 10, seed: int = 7) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = T0 + np.sort(rng.uniform(0, seconds, n))
    cmd = rng.choice(["find", "insert", "update"], n, p=[0.6, 0.3, 0.1])
    ns = rng.lognormal(mean=12, sigma=1.2, size=n).astype(np.int64) + 1
    df = pd.DataFrame({"time": t, "elapsed_s": t - T0, "pid": 1, "tid": 1, "fd": 5,
                       "request_id": np.arange(n), "opcode": "OP_MSG", "command": cmd,
                       "bytes_in": 100, "bytes_out": 50, "latency_ns": ns, "stream": False})
    return wire_events.typed(df)


def test_histograms_agree_with_the_events_they_came_from():
    ev = _events()
    exact = latencies.Latencies.from_events(ev)
    hist = latencies.Latencies(exact.hist, exact.totals)          # the histograms alone
    assert int(exact.hist["count"].sum()) == len(ev) == int(exact.totals["count"].sum())
    for start, end in ((T0, T0 + 10), (T0 + 2, T0 + 7)):         # on interval edges
        a, b = exact.stats(start, end), hist.stats(start, end)
        assert set(a) == set(b) == {"find", "insert", "update"}
        for cmd in a:
            assert a[cmd]["count"] == b[cmd]["count"]
            assert a[cmd]["avg"] == pytest.approx(b[cmd]["avg"], rel=1e-12)
            assert a[cmd]["max"] == b[cmd]["max"]
            for q in ("p50", "p95", "p99"):
                assert abs(b[cmd][q] - a[cmd][q]) <= loglinear.MAX_ERROR * a[cmd][q] + 0.5
        assert exact.rates(start, end) == pytest.approx(hist.rates(start, end))
    pd.testing.assert_frame_equal(exact.per_second(), hist.per_second())
    lo = T0 + np.arange(10.0)
    for cmd in ("find", "insert"):
        # per-second windows on interval edges: the same counts either way
        got = hist.answered(cmd, lo, lo + 1)
        assert got.sum() == (ev["command"] == cmd).sum()
        assert (got == exact.answered(cmd, lo, lo + 1)).all()


def test_windows_inside_an_interval_are_exact_only_with_events():
    ev = _events(seconds=4)
    exact = latencies.Latencies.from_events(ev)
    inside = ev[(ev["time"] >= T0 + 1.25) & (ev["time"] < T0 + 1.75)]
    got = exact.stats(T0 + 1.25, T0 + 1.75)
    assert sum(s["count"] for s in got.values()) == len(inside)
    # from the histograms, the interval [1, 2) has its middle (1.5) in the window
    hist = latencies.Latencies(exact.hist, exact.totals)
    whole = ev[(ev["time"] >= T0 + 1) & (ev["time"] < T0 + 2)]
    assert sum(s["count"] for s in hist.stats(T0 + 1.25, T0 + 1.75).values()) == len(whole)


def test_windows_prepared_at_once_are_the_windows_asked_alone():
    # the histograms alone, their rows out of time order, with requests that asked for
    # no reply and failed replies; windows that overlap, cut intervals, pass the ends
    ev = _events(seconds=10)
    ex = latencies.Latencies.from_events(ev)
    tot = ex.totals.sample(frac=1, random_state=3).reset_index(drop=True)
    tot.loc[tot["time"] == T0 + 4, "noreply"] = 2
    err = pd.DataFrame({"time": [T0 + 3, T0 + 3, T0 + 8], "length_s": 1.0,
                        "command": ["insert", "insert", "find"], "opcode": "OP_MSG",
                        "code": [11000, 11000, 2], "count": [1, 2, 4]})
    windows = [(T0 + a, T0 + b) for a, b in ((0, 10), (2, 7), (2.5, 3.2), (6.9, 7.1),
                                             (3, 5), (-5, 0.2), (9.6, 30), (1, 9))]

    def lat():
        return latencies.Latencies(ex.hist.iloc[::-1].reset_index(drop=True), tot.copy(),
                                   errors=err.copy())

    many, alone = lat(), lat()
    many.prepare(windows)
    for a, b in windows:
        assert many.stats(a, b) == alone.stats(a, b)
        assert many.rates(a, b) == alone.rates(a, b)
        assert many.failures(a, b) == alone.failures(a, b)
        assert many.histogram("find", a, b) == alone.histogram("find", a, b)
    # the rule, from the events: a window takes its whole seconds; one with none, the
    # second it overlaps most ([2, 3) for 2.5..3.2)
    for (a, b), (lo, hi) in zip(windows[:3], ((0, 10), (2, 7), (2, 3))):
        inside = ev[(ev["time"] >= T0 + lo) & (ev["time"] < T0 + hi)]
        got = many.stats(a, b)
        assert {c: s["count"] for c, s in got.items()} == inside["command"].value_counts().to_dict()
        assert got["insert"]["max"] == inside[inside["command"] == "insert"]["latency_ns"].max()
    assert many.stats(T0 + 3, T0 + 5)["find"]["no_reply"] == 2      # the second 4..5
    assert many.stats(T0 + 6.9, T0 + 7.1)["find"]["no_reply"] == 0
    assert many.failures(T0 + 3, T0 + 5) == {"insert": {11000: 3}}
    assert many.failures(T0 + 1, T0 + 9) == {"find": {2: 4}, "insert": {11000: 3}}


def test_nearest_rank():
    v = np.array([10, 20, 30, 40])
    assert [latencies.nearest_rank(v, q) for q in (1, 25, 26, 50, 75, 100)] == \
        [10, 10, 20, 20, 30, 40]


def test_a_summary_per_connection_is_each_connections_buckets():
    """latency_summary.from_latencies by connection (one pass over the tables, for
    thousands of connections): each connection's histogram holds its own buckets summed
    over the seconds, its sum and max are its own, and windows take their seconds."""
    from mongoprobe.model import latency_summary

    rng = np.random.default_rng(3)
    conns, seconds = 300, 3
    rows = [(T0 + s, 1.0, fd, int(b), int(n)) for s in range(seconds) for fd in range(conns)
            for b, n in zip(rng.integers(300, 400, 3), rng.integers(0, 4, 3))]
    ch = pd.DataFrame(rows, columns=["time", "length_s", "fd", "bucket", "count"])
    per = ch.groupby(["time", "fd"], as_index=False)["count"].sum()
    ct = per.assign(length_s=1.0, sum_ns=per["fd"] * 1000 + per["count"], max_ns=per["fd"] + 7,
                    noreply=0)
    empty = latencies.Latencies.from_events(_events(n=10, seconds=1))
    lat = latencies.Latencies(empty.hist, empty.totals, conn_hist=ch, conn_totals=ct)
    for start, end in ((None, None), (T0 + 1, T0 + 2)):
        window = ch if start is None else ch[(ch["time"] >= start) & (ch["time"] < end)]
        got = latency_summary.from_latencies(lat, pid=9, start=start, end=end).by_conn
        counted = window.groupby("fd")["count"].sum()
        assert set(got) == {f"9,{fd}" for fd, n in counted.items() if n}
        for fd, n in counted.items():
            if not n:
                continue
            g = got[f"9,{fd}"]
            want = window[window["fd"] == fd].groupby("bucket")["count"].sum()
            assert [(lo, hi) for lo, hi in zip(g.hist["lo"], g.hist["hi"])] == \
                [loglinear.bounds(int(b)) for b in want.index]
            assert g.hist["count"].tolist() == want.tolist() and g.count == n
            tk = ct[(ct["fd"] == fd) & ct["time"].isin(window["time"].unique())]
            assert (g.total_ns, g.max_ns) == (int(tk["sum_ns"].sum()), int(tk["max_ns"].max()))
