"""mongoprobe.analysis.normalize: the seeds' per-operation metrics and throughput percentiles.

The seeds (docs/sources.md) printed raw columns and the normalised columns, rounded.
These tests recompute every normalised cell of every seed table from the raw cells of
its row, with interval arithmetic: a printed number with d decimals stands for anything
within half a unit of its last digit, so the recomputed value must come out, for some
raw values consistent with the printed ones, within the rounding of the printed result.
"""

from __future__ import annotations

import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mongoprobe.analysis import normalize as nz
from mongoprobe.formats.insert_benchmark import parse_insert_benchmark, wide_tables
from mongoprobe.formats.iostat import parse_iostat
from mongoprobe.formats.vmstat import parse_vmstat
from mongoprobe.formats.ycsb import parse_ycsb

ROOT = Path(__file__).resolve().parent.parent
IB = ROOT / "samples" / "insert_benchmark"


def _tables(name: str) -> list[pd.DataFrame]:
    """Wide tables, with each cell's printed text kept in attrs["text"] for its rounding."""
    long = parse_insert_benchmark(IB / name)
    out = []
    for w, (_, g) in zip(wide_tables(long), long.groupby("table", sort=True)):
        w.attrs["text"] = g.pivot(index="row", columns="column", values="text")
        out.append(w)
    return out


def _half_ulp(text: str) -> float:
    """Half a unit of the printed number's last digit: "32.0" -> 0.05, "850" -> 0.5."""
    exp = Decimal(text).as_tuple().exponent
    return 0.5 * 10.0 ** exp


_DENOMINATORS = ("qps", "ips", "qps.av", "ips.av")


def _range(w: pd.DataFrame, i: int, column: str, kb_per_mb: float) -> tuple[float, float]:
    """The range of a normalised cell over every raw row consistent with the printed row:
    numerators at the low end of their rounding and denominators at the high end give
    the lowest value, the other way round the highest."""
    txt = w.attrs["text"].iloc[i]
    ends = []
    for sign in (-1, 1):
        row = {"engine": [w["engine"].iloc[i]]}
        for c in w.columns[1:]:
            s = -sign if c in _DENOMINATORS else sign
            row[c] = [w[c].iloc[i] + s * _half_ulp(txt[c])]
        ends.append(nz.normalize_table(pd.DataFrame(row), kb_per_mb)[column].iloc[0])
    return min(ends), max(ends)


def _reproduced(w: pd.DataFrame, kb_per_mb: float) -> list[tuple[str, str, bool]]:
    norm = [c for c in w.columns if c in nz._SEED]
    out = []
    for i in range(len(w)):
        for c in norm:
            lo, hi = _range(w, i, c, kb_per_mb)
            printed, h = w[c].iloc[i], _half_ulp(w.attrs["text"].iloc[i][c])
            out.append((w["engine"].iloc[i], c, lo <= printed + h and printed - h <= hi))
    return out


SEED000 = _tables("seed000-io-cpu-tables.txt")
SEED001 = _tables("seed001-server32730-tables.txt")


@pytest.mark.parametrize("i", range(4))
def test_seed000_normalised_columns_are_reproduced(i: int) -> None:
    """r/o rkb/o wkb/o cs/o (us+sy)/o cs/i (us+sy)/i of the 2015 blog, 1024 KB per MB."""
    res = _reproduced(SEED000[i], 1024)
    assert len(res) == (12 if i in (0, 2) else 8)
    assert [r for r in res if not r[2]] == []


@pytest.mark.parametrize("i", range(4))
def test_seed001_normalised_columns_are_reproduced(i: int) -> None:
    """wkb/i r/q rkb/q Mcpu/q of SERVER-32730, 1000 KB per MB."""
    res = _reproduced(SEED001[i], 1000)
    assert len(res) == (8 if i == 1 else 4)
    assert [r for r in res if not r[2]] == []


def test_each_seed_has_its_own_kb_per_mb() -> None:
    wrong000 = [r for w in (SEED000[0], SEED000[2]) for r in _reproduced(w, 1000) if not r[2]]
    wrong001 = [r for w in SEED001 for r in _reproduced(w, 1024) if not r[2]]
    assert ("toku", "rkb/o", False) in wrong000  # 32.0 * 1000 / 850 = 37.6, printed 38.6
    assert ("WiredTiger-3.6.0", "wkb/i", False) in wrong001  # 57.2 * 1024 / 1584 = 36.98


def test_the_examples_of_the_seed() -> None:
    # seed 000, 10i.0q: ips 43667, r/s 587 -> r/o 0.01; rmb/s 23.7 -> rkb/o 0.6
    m = nz.per_op(43667, r_s=587, rmb_s=23.7, wmb_s=96.1, cs=189501, us=31.7, sy=4.6)
    assert (round(m["r/o"], 2), round(m["rkb/o"], 1), round(m["wkb/o"], 1)) == (0.01, 0.6, 2.3)
    assert round(m["cs/o"]) == 4 and m["(us+sy)/o"] == pytest.approx(0.000830, abs=5e-6)
    # seed 000, 0i.10q toku: 850 qps, cs 18644 -> 22; us+sy 72.2 -> 0.085
    m = nz.per_op(850, cs=18644, cpu=72.2)
    assert round(m["cs/o"]) == 22 and round(m["(us+sy)/o"], 3) == 0.085
    # seed 001: Mcpu/q 1184 for 31386 qps at cpu 37.2 -- without the number of CPUs
    m = nz.per_op(31386, cpu=37.2, ncpu=40)
    assert m["Mcpu/o"] == pytest.approx(1185.2, abs=0.1)  # 37.15..37.25 -> 1183.7..1186.8
    assert 37.15e6 / 31386 <= 1184 <= 37.25e6 / 31386
    assert m["cpu_us/o"] == pytest.approx(474.1, abs=0.1)  # with 40 CPUs: not the seed's
    assert m["Mcpu/o"] == pytest.approx(m["cpu_us/o"] * 100 / 40)


def test_per_op_missing_inputs_and_zero_ops() -> None:
    m = nz.per_op(100.0, cs=50)
    assert m["cs/o"] == 0.5 and all(math.isnan(m[k]) for k in ("r/o", "rkb/o", "Mcpu/o",
                                                               "cpu_us/o"))  # fmt: skip
    assert math.isnan(nz.per_op(0, cs=5)["cs/o"])
    s = nz.per_op(pd.Series([10.0, 0.0]), r_s=pd.Series([5.0, 5.0]))["r/o"]
    assert s.iloc[0] == 0.5 and math.isnan(s.iloc[1])


# --- throughput --------------------------------------------------------------------------


def test_p95_is_the_low_tail_nearest_rank() -> None:
    assert nz.p95_rate(range(1, 101)) == 5  # 95 of the 100 intervals reach 5 or more
    assert nz.p95_rate([7, 3, 9]) == 3  # fewer than 20 intervals: the slowest one
    assert nz.p95_rate(list(range(1, 21)) + [float("nan")]) == 1
    assert math.isnan(nz.p95_rate([]))
    rates = np.random.default_rng(1).uniform(100, 200, 1000)
    p = nz.p95_rate(rates)
    # one of the rates; at least 95% of the intervals reach it, at most 5% are below it,
    # and at least 5% are at or below it (the nearest-rank 5th percentile)
    assert p in rates and (rates >= p).mean() >= 0.95
    assert (rates < p).mean() <= 0.05 <= (rates <= p).mean()


def test_window_rates_and_throughput() -> None:
    t = np.arange(0, 31.0)  # 30 s, one sample per second
    cum = np.concatenate([np.arange(0, 2001, 100), 2000 + np.arange(1, 11) * 10])
    r = nz.window_rates(t, cum, 10)
    assert r.tolist() == [100.0, 100.0, 10.0]
    tp = nz.throughput(t, cum, 10)
    assert tp["avg"] == pytest.approx(2100 / 30) and tp["p95"] == 10 and tp["intervals"] == 3
    part = nz.throughput(t, cum, 10, start=5, end=25)  # counts interpolated at the edges
    assert part["ops"] == pytest.approx(2050 - 500) and part["intervals"] == 2
    assert part["p95"] == pytest.approx((2050 - 1500) / 10)
    assert math.isnan(nz.throughput([0, 5], [0, 10], 10)["p95"])  # no full window
    with pytest.raises(ValueError):
        nz.window_rates([0, 2, 1], [0, 1, 2])


def test_ycsb_throughput_from_the_real_load() -> None:
    df = parse_ycsb(ROOT / "samples/ycsb/ycsb-0.17-load.status.txt", tz="UTC")
    ops = nz.ycsb_ops(df)
    assert len(ops) == 17 and ops["operations"].iloc[-1] == 20000
    assert ops["operations"].is_monotonic_increasing
    tp = nz.throughput(ops["time"], ops["operations"], 1.0)
    assert tp["ops"] == 20000 and tp["seconds"] == pytest.approx(15.865)
    assert tp["intervals"] == 15 and tp["p95"] < tp["avg"]
    ins = nz.ycsb_ops(df, ["INSERT"])  # from the per-interval Count
    assert ins["operations"].iloc[-1] == df.loc[df["op"] == "INSERT", "count"].sum()
    old = nz.ycsb_ops(parse_ycsb(ROOT / "samples/ycsb/seed004-ycsb-0.1-load.txt"))
    assert old["time"].tolist()[:3] == [0.0, 10.0, 20.0]  # elapsed seconds, no wall clock
    with pytest.raises(ValueError, match="no per-operation Count"):
        nz.ycsb_ops(parse_ycsb(ROOT / "samples/ycsb/seed004-ycsb-0.1-load.txt"), ["INSERT"])


# --- system metrics per phase ------------------------------------------------------------


def test_system_means_drop_the_since_boot_row() -> None:
    v = parse_vmstat(ROOT / "samples/sysstat/vmstat-t-1.txt")
    i = parse_iostat(ROOT / "samples/sysstat/iostat-xmt-1-3.txt", tz="UTC")
    m = nz.system_means(v, i)
    assert m["samples_vmstat"] == 4 and m["cs"] == pytest.approx((1569 + 2113 + 2008 + 2009) / 4)
    assert m["samples_iostat"] == 2 and m["r/s"] == pytest.approx((106 + 124) / 2)
    t0 = v["time"].iloc[0]
    w = nz.system_means(v, i, start=t0 + 1, end=t0 + 3)  # rows ending in (t0+1, t0+3]
    assert w["samples_vmstat"] == 2 and w["us"] == pytest.approx((83 + 93) / 2)
    with pytest.raises(ValueError, match="vmstat -t"):
        nz.system_means(parse_vmstat(ROOT / "samples/sysstat/vmstat-1.txt"), start=1, end=2)


def test_the_phase_model_on_ycsb_intervals() -> None:
    # the YCSB adapter's intervals through the one phase model: avg over the phase,
    # p95 the nearest-rank 5th percentile of the full intervals' rates
    from mongoprobe import loadtools
    from mongoprobe.analysis import phase_table as phases
    from mongoprobe.formats import loadout

    text = (ROOT / "samples/ycsb/ycsb-0.17-load.status.txt").read_text()
    tool, _ = loadtools.read_output(loadout.read_output(text))
    row = phases.compute(phases.Inputs(tool, None, None, None, None, None, None)).iloc[0]
    iv = tool.intervals
    assert iv["count"].sum() == 20000
    p = tool.phases.iloc[0]
    assert row["ips_avg"] == pytest.approx(20000 / (p["end"] - p["start"]))
    full = iv[iv["full"]]
    assert row["ips_p95"] == nz.p95_rate(full["count"] / full["length_s"])
    assert math.isnan(row["qps_avg"]) and math.isnan(row["r_per_op"])


def test_phase_table_of_a_recorded_run() -> None:
    import mongoprobe
    from mongoprobe.analysis import phase_table as phases

    run = mongoprobe.load_run(ROOT / "samples/load/run-ferretdb")
    t = phases.phase_table(run)
    v, i = run.vmstat, run.iostat
    assert t["name"].tolist() == run.phases["name"].tolist()
    for r in t.itertuples():
        m = nz.system_means(v, i, r.start, r.end)
        assert m["samples_vmstat"] >= 1 and m["samples_iostat"] >= 1
        assert r.cs_per_op == pytest.approx(m["cs"] / r.ops_avg)
        assert r.cpu_us_per_op == pytest.approx(
            (m["us"] + m["sy"]) / 100 * run.manifest["host"]["cpus"] * 1e6 / r.ops_avg)


def test_phase_tables_keep_their_columns_whatever_the_values() -> None:
    """A value wider than its column (20086.7 cs/o, 524288 CPU us/o, a p99 past 10 s)
    is shortened, never wrapped onto a line of its own; a missing one is a ``-`` where
    the number would end; command names keep 20 characters."""
    import mongoprobe
    from mongoprobe.analysis import phase_table as phases

    run = mongoprobe.load_run(ROOT / "samples/load/run-ferretdb")
    t = phases.phase_table(run)
    t.loc[0, "cs_per_op"], t.loc[0, "cpu_us_per_op"] = 20086.7, 524288.0
    t.loc[1, "r_per_op"] = math.nan
    lat = dict(t.loc[0, "latency_us"])
    lat["listCollectionsLong1"] = {"count": 12_345_678, "p50": 1.0, "p95": 2.0,
                                   "p99": 12_000_000.0, "max": 1_234_567_890.0}
    t.at[0, "latency_us"] = lat
    rates = dict(t.loc[0, "server_rates"])
    rates["createIndexes"] = 0.5
    t.at[0, "server_rates"] = rates
    text = phases.render(t, phases.tool_json(run), run.lost)
    lines = text.splitlines()
    assert max(map(len, lines)) < 80
    sys_head = next(i for i, s in enumerate(lines) if s.split()[:2] == ["phase", "r/s"])
    rows = lines[sys_head + 1: sys_head + 1 + len(t)]
    assert [len(s) for s in rows] == [len(lines[sys_head])] * len(t)
    assert rows[0].split()[-3:] == ["20087", rows[0].split()[-2], "524288"]
    # the dash ends where the r/o numbers end
    assert rows[1].split()[4] == "-"
    assert rows[1].index(" - ") + 2 == lines[sys_head].index("r/o") + 3
    row = next(s for s in lines if "listCollectionsLong1" in s)
    assert row.split()[1:] == ["listCollectionsLong1", "12.3M", "1", "2", "12M", "1.23G"]
    assert len(row) == len(next(s for s in lines if s.split()[:2] == ["phase", "command"]))
    assert any(s.split()[1:4] == ["-", "-", "-"] and "createIndexes" in s for s in lines)
