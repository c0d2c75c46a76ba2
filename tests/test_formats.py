"""formats.{ycsb,vmstat,iostat,mpstat,pidstat,insert_benchmark,phase_markers,dtrace_latency,
dtrace_drops,registry} and the ``parse``/``quantize`` subcommands.

Every real sample in samples/{ycsb,sysstat,insert_benchmark,iibench,dtrace}/ is diffed against its
golden output in tests/expected/formats/ (``MONGOPROBE_BLESS=1`` re-blesses, tests/golden.py), checked
against what the tool itself printed elsewhere in the same output, and damaged copies must
fail on the right line.
"""

from __future__ import annotations

import io
import json
import math
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd
import pytest

from mongoprobe.formats import registry
from mongoprobe.formats.errors import FormatError
from mongoprobe.formats.insert_benchmark import (
    parse_insert_benchmark,
    parse_insert_benchmark_hist,
    wide_tables,
)
from mongoprobe.formats.iostat import iostat_totals, parse_iostat, parse_iostat_cpu
from mongoprobe.formats.mpstat import parse_mpstat
from mongoprobe.formats.phase_markers import marker, parse_phase_markers
from mongoprobe.formats.pidstat import parse_pidstat
from mongoprobe.formats.vmstat import parse_vmstat
from mongoprobe.formats.ycsb import parse_ycsb, parse_ycsb_summary

import golden

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"
OWN_DIRS = ("ycsb", "sysstat", "insert_benchmark", "iibench", "dtrace")


def S(rel: str) -> Path:
    return SAMPLES / rel


def _epoch(s: str) -> float:
    return datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def _damaged(rel: str, lineno: int, new: str | None) -> str:
    """The sample's text with line ``lineno`` (1-based) replaced (None: deleted)."""
    lines = S(rel).read_text().split("\n")
    if new is None:
        del lines[lineno - 1]
    else:
        lines[lineno - 1] = new
    return "\n".join(lines)


def _fails_at(parse, text: str, line: int, *words: str, **kw) -> FormatError:
    with pytest.raises(FormatError) as ei:
        parse(text, "damaged.txt", **kw)
    e = ei.value
    assert (e.source, e.line) == ("damaged.txt", line), str(e)
    assert str(e).startswith(f"damaged.txt:{line}: expected ")
    for w in words:
        assert w in str(e)
    return e


# --- golden files ------------------------------------------------------------------------
# Each (sample, format) pair's DataFrame as CSV, wall-clock times read as UTC (the zone
# the samples were recorded in); a pair in ERRORS is damaged on purpose and its golden
# holds the FormatError message.

# (sample path under samples/, registry format name)
CASES: list[tuple[str, str]] = [
    ("ycsb/ycsb-0.17-load.status.txt", "ycsb"),
    ("ycsb/ycsb-0.17-workloada-run.status.txt", "ycsb"),
    ("ycsb/ycsb-0.17-workloada-run.summary.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-load.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-load.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-workloada-run.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-workloada-run.txt", "ycsb-summary"),
    ("ycsb/seed004-ycsb-0.1-workloadb-run.txt", "ycsb"),
    ("ycsb/seed004-ycsb-0.1-workloadb-run.txt", "ycsb-summary"),
    ("ycsb/ycsb-0.17-ferretdb-load+run.stderr.txt", "ycsb"),
    ("ycsb/ycsb-0.17-ferretdb-load+run.stdout.txt", "ycsb-summary"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "iibench"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "iibench-summary"),
    ("iibench/iibench-mongo-1i-1q-30k.stdout.txt", "insert-benchmark-hist"),
    ("sysstat/vmstat-1.txt", "vmstat"),
    ("sysstat/vmstat-t-1.txt", "vmstat"),
    ("sysstat/vmstat-nw-1.txt", "vmstat"),
    ("sysstat/vmstat-1-26.txt", "vmstat"),
    ("sysstat/seed004-smartos-vmstat-1.txt", "vmstat"),
    ("sysstat/iostat-x-1-3.txt", "iostat"),
    ("sysstat/iostat-x-1-3.txt", "iostat-totals"),
    ("sysstat/iostat-x-1-3.txt", "iostat-cpu"),
    ("sysstat/iostat-xmt-1-3.txt", "iostat"),
    ("sysstat/iostat-xmt-1-3.txt", "iostat-cpu"),
    ("sysstat/iostat-xk-d-1-3.txt", "iostat"),
    ("sysstat/iostat-xt-iso-2dev.txt", "iostat"),
    ("sysstat/iostat-xt-iso-2dev.txt", "iostat-totals"),
    ("sysstat/iostat-d-1-3.txt", "iostat"),
    ("sysstat/iostat-d-1-3.txt", "iostat-totals"),
    ("sysstat/mpstat-P-ALL-1-3.txt", "mpstat"),
    ("sysstat/pidstat-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-t-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-h-udwr-p-1-3.txt", "pidstat"),
    ("sysstat/pidstat-hHt-udwr-p-1-3.txt", "pidstat"),
    ("insert_benchmark/seed000-io-cpu-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed000-ips-qps-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed000-glued-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed001-server32730-tables.txt", "insert-benchmark"),
    ("insert_benchmark/seed001-server32730-hist.txt", "insert-benchmark-hist"),
    ("dtrace/mongo_time-ferretdb.txt", "dtrace-latency"),
    ("dtrace/mongo_time-ferretdb.txt", "dtrace-latency-totals"),
    ("dtrace/mongo_time-ferretdb.txt", "quantize"),
    ("dtrace/mongo_time-dynvarsize-1k.txt", "dtrace-latency"),
    ("dtrace/mongo_time-dynvarsize-1k.txt", "dtrace-latency-totals"),
    ("dtrace/mongo_time-dynvarsize-1k.stderr.txt", "dtrace-drops"),
    ("dtrace/mongo_snoop-wireserver-mongod.txt", "events"),
]
# pairs whose golden is the FormatError message (the input cannot be read, on purpose)
ERRORS = {("insert_benchmark/seed000-glued-tables.txt", "insert-benchmark")}


def golden_path(sample: str, fmt: str) -> str:
    """Where a pair's golden file is, under tests/expected/."""
    d, _, name = sample.rpartition("/")
    stem = name.removesuffix(".txt")
    return f"formats/{d}/{stem}.{fmt}.{'error' if (sample, fmt) in ERRORS else 'csv'}"


def render(sample: str, fmt: str) -> str:
    """What the golden file holds for one pair: the CSV, or the error message."""
    path = SAMPLES / sample
    try:
        df = registry.parse(fmt, path, f"samples/{sample}", tz="UTC")
    except FormatError as e:
        if (sample, fmt) not in ERRORS:
            raise
        return str(e) + "\n"
    if (sample, fmt) in ERRORS:
        raise AssertionError(f"{sample} ({fmt}) parsed, but it is listed in ERRORS")
    return df.to_csv(index=False, lineterminator="\n")



def test_every_sample_is_a_golden_case_and_every_golden_has_a_case() -> None:
    samples = {str(p.relative_to(SAMPLES)) for d in OWN_DIRS for p in (SAMPLES / d).glob("*.txt")}
    assert samples == {s for s, _ in CASES}, "add the sample to CASES"
    assert golden.files("formats") == {golden.EXPECTED / golden_path(s, f) for s, f in CASES}, \
        "stale golden files in tests/expected/formats"


@pytest.mark.parametrize("sample, fmt", CASES, ids=[f"{s}:{f}" for s, f in CASES])
def test_sample_matches_golden(sample: str, fmt: str) -> None:
    golden.check(golden_path(sample, fmt), render(sample, fmt))


def test_every_sample_directory_says_where_its_files_come_from() -> None:
    for d in OWN_DIRS:
        readme = (SAMPLES / d / "README.md").read_text()
        for p in (SAMPLES / d).glob("*.txt"):
            assert f"`{p.name}`" in readme, f"{d}/README.md does not describe {p.name}"


# --- detection ---------------------------------------------------------------------------


@pytest.mark.parametrize("sample, fmt", sorted({(s, f) for s, f in CASES
                                                if registry.get(f).auto}))  # fmt: skip
def test_detect_names_the_format(sample: str, fmt: str) -> None:
    text = S(sample).read_text()
    formats = {f for s, f in CASES if s == sample and registry.get(f).auto}
    # the first in the registry's order (YCSB seeds hold status lines and a summary,
    # iibench's output its progress lines, totals and histograms)
    assert registry.detect(text) == next(f.name for f in registry.FORMATS if f.name in formats)
    # and no other format claims it (YCSB seeds hold status lines and a summary)
    claimed = {f.name for f in registry.FORMATS if f.auto and f.is_format(text)}
    assert claimed == formats


def test_detect_other_inputs() -> None:
    assert registry.detect("") is None
    assert registry.detect("hello\nworld\n") is None
    assert registry.detect(S("quantize/dtrace-mongo_time-load.txt").read_text()) == "quantize"
    assert registry.detect(S("probes/mongo_snoop-ferretdb.txt").read_text()) == "events"
    # auto names every format it tried and why each refused
    with pytest.raises(FormatError) as e:
        registry.parse("auto", "just\ntext\n", "x.txt")
    for f in registry.FORMATS:
        assert (f"{f.name}: no " in str(e.value)) == f.auto
    assert "ycsb: no status lines '[DATE] N sec: N operations; ...'" in str(e.value)
    with pytest.raises(KeyError, match="unknown format"):
        registry.get("nope")


def test_registry_is_cheap_to_import() -> None:
    code = ("import sys; import mongoprobe.formats.registry, mongoprobe.cli.parse; "
            "print('pandas' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "analyzer")})
    assert out.stdout.strip() == "False"


def test_inputs_as_text_path_and_file_agree() -> None:
    rel = "sysstat/vmstat-t-1.txt"
    a = parse_vmstat(S(rel))
    b = parse_vmstat(str(S(rel)))
    c = parse_vmstat(S(rel).read_text())
    with open(S(rel)) as fh:
        d = parse_vmstat(fh)
    for x in (b, c, d):
        pd.testing.assert_frame_equal(a, x)
    with pytest.raises(FileNotFoundError):
        parse_vmstat("no/such/file.txt")


# --- YCSB --------------------------------------------------------------------------------


def test_ycsb_017_status_columns_and_values() -> None:
    df = parse_ycsb(S("ycsb/ycsb-0.17-load.status.txt"), tz="UTC")
    assert list(df.columns) == ["time", "elapsed_s", "operations", "ops_per_s", "op", "count",
                                "avg_us", "min_us", "max_us", "p90_us", "p99_us", "p999_us",
                                "p9999_us", "line"]  # fmt: skip
    assert [str(t) for t in df.dtypes] == ["float64", "int64", "int64", "float64", "str",
                                           "Int64"] + ["float64"] * 7 + ["int64"]  # fmt: skip
    first = df[df["op"] == "INSERT"].iloc[0]
    assert first["time"] == pytest.approx(_epoch("2026-11-22 08:46:57.092"))
    assert (first["elapsed_s"], first["operations"], first["count"]) == (1, 254, 254)
    assert (first["avg_us"], first["min_us"], first["max_us"]) == (10046.31, 1617, 110591)
    assert (first["p90_us"], first["p99_us"], first["p999_us"], first["p9999_us"]) == (
        15767, 102015, 110591, 110591)
    # the "0 sec: 0 operations; est completion in 0 second" line is kept, without an op
    assert (df.iloc[0]["op"], df.iloc[0]["operations"]) == ("", 0)
    assert math.isnan(df.iloc[0]["ops_per_s"])
    # the last line's 20000 is the recordcount of the command line
    assert df["operations"].iloc[-1] == 20000
    assert set(df["op"]) == {"", "INSERT", "CLEANUP"}


def test_ycsb_tz_moves_wall_clock_only() -> None:
    utc = parse_ycsb(S("ycsb/ycsb-0.17-load.status.txt"), tz="UTC")
    ny = parse_ycsb(S("ycsb/ycsb-0.17-load.status.txt"), tz="America/New_York")
    assert (ny["time"] - utc["time"]).round(6).unique().tolist() == [5 * 3600.0]


def test_ycsb_empty_interval_has_no_latency() -> None:
    df = parse_ycsb(S("ycsb/ycsb-0.17-workloada-run.status.txt"), tz="UTC")
    last = df[df["operations"] == 111]
    read = last[last["op"] == "READ"].iloc[0]
    assert read["count"] == 0  # printed Min=9223372036854775807, Avg=NaN, Max=0
    assert all(math.isnan(read[c]) for c in ("avg_us", "min_us", "max_us", "p99_us"))
    assert last[last["op"] == "UPDATE"].iloc[0]["max_us"] == 1296383


def test_ycsb_summary_agrees_with_the_status_lines() -> None:
    st = parse_ycsb(S("ycsb/ycsb-0.17-workloada-run.status.txt"), tz="UTC")
    sm = parse_ycsb_summary(S("ycsb/ycsb-0.17-workloada-run.summary.txt"))
    ops = sm[(sm["stat"] == "operations")].set_index("section")["value"]
    assert ops["READ"] + ops["UPDATE"] == st["operations"].iloc[-1] == 111
    counts = st.groupby("op")["count"].sum()
    assert counts["READ"] == ops["READ"] and counts["UPDATE"] == ops["UPDATE"]
    row = sm[(sm["section"] == "READ") & (sm["stat"] == "p95_us")].iloc[0]
    assert (row["metric"], row["value"], row["value_us"]) == (
        "95thPercentileLatency(us)", 339199, 339199)
    ret = sm[sm["stat"] == "return"]
    assert ret[["section", "code", "value"]].values.tolist() == [["READ", "OK", 61],
                                                                 ["UPDATE", "OK", 50]]


def test_ycsb_old_status_lines_and_summary() -> None:
    rel = "ycsb/seed004-ycsb-0.1-workloada-run.txt"
    st = parse_ycsb(S(rel))
    assert st["time"].isna().all() and st["count"].isna().all()
    r10 = st[st["elapsed_s"] == 10].set_index("op")
    assert r10.loc["UPDATE", "avg_us"] == 747864.1 and r10.loc["READ", "avg_us"] == 379445.04
    assert r10["ops_per_s"].tolist() == [1130.24, 1130.24]
    assert st[["min_us", "p99_us"]].isna().all().all()
    sm = parse_ycsb_summary(S(rel))
    assert sm.iloc[0][["section", "stat", "value"]].tolist() == ["OVERALL", "runtime_ms", 522700.0]
    p95 = sm[(sm["section"] == "UPDATE") & (sm["stat"] == "p95_us")].iloc[0]
    assert (p95["metric"], p95["value"], p95["value_us"]) == (
        "95thPercentileLatency(ms)", 365, 365000)
    b = sm[(sm["section"] == "READ") & (sm["stat"] == "bucket")].iloc[0]
    assert (b["code"], b["value"], b["lo_us"], b["hi_us"]) == ("0", 706416, 0, 1000)
    assert sm[sm["stat"] == "return"]["code"].tolist() == ["0", "0"]
    load = parse_ycsb(S("ycsb/seed004-ycsb-0.1-load.txt"))
    cleanup = load[load["op"] == "CLEANUP"]
    assert cleanup["elapsed_s"].tolist() == [660, 670, 680, 690]
    assert cleanup["avg_us"].tolist() == [26, 6.33, 4.67, 5.62]


def test_ycsb_summary_overflow_bucket_and_percentile_names() -> None:
    text = ("[READ], 99.9PercentileLatency(us), 5\n[READ], >1000, 3\n"
            "[READ], 999, 1\n[READ], Return=ERROR, 2\n[READ], Weird(x), 1\n")  # fmt: skip
    sm = parse_ycsb_summary(text)
    assert sm["stat"].tolist() == ["p999_us", "bucket", "bucket", "return", ""]
    assert sm.iloc[1][["lo_us", "hi_us"]].tolist() == [1e6, math.inf]
    assert sm.iloc[2][["lo_us", "hi_us"]].tolist() == [999000, 1e6]
    assert sm.iloc[3]["code"] == "ERROR"


def test_ycsb_damaged() -> None:
    rel = "ycsb/ycsb-0.17-load.status.txt"
    line = S(rel).read_text().split("\n")[13]  # the 2 sec line
    _fails_at(parse_ycsb, _damaged(rel, 14, line[:150]), 14, "status line")
    _fails_at(parse_ycsb, _damaged(rel, 14, line.replace("Max=545279", "Max=54x")), 14,
              "KEY=NUMBER", "[INSERT")
    _fails_at(parse_ycsb, _damaged(rel, 14, line.replace("789 current", "seven current")), 14)
    _fails_at(parse_ycsb, "Loading workload...\nStarting test.\n", 2, "none found")
    summ = "ycsb/ycsb-0.17-workloada-run.summary.txt"
    _fails_at(parse_ycsb_summary, _damaged(summ, 16, "[READ], 95thPercentileLatency(us), x"),
              16, "[SECTION], METRIC, NUMBER")
    _fails_at(parse_ycsb_summary, _damaged(summ, 3, "[TOTAL_GCS_G1_Young_Generation], Count"), 3)


# --- vmstat ------------------------------------------------------------------------------


def test_vmstat_forms() -> None:
    plain = parse_vmstat(S("sysstat/vmstat-1.txt"))
    assert list(plain.columns) == ["sample", "time", "r", "b", "swpd", "free", "buff", "cache",
                                   "si", "so", "bi", "bo", "in", "cs", "us", "sy", "id", "wa",
                                   "st"]  # fmt: skip
    assert plain["time"].isna().all() and (plain.dtypes.drop("time") == "int64").all()
    assert plain["sample"].tolist() == [0, 1, 2, 3, 4]
    t = parse_vmstat(S("sysstat/vmstat-t-1.txt"))  # the header names UTC: no tz needed
    assert t.attrs["tz"] == "UTC"
    assert t["time"].tolist() == [_epoch(f"2026-11-22 10:31:{s}.0") for s in range(22, 27)]
    assert t.iloc[1][["bi", "bo", "cs", "us", "sy"]].tolist() == [106540, 128140, 1569, 87, 13]
    assert parse_vmstat(S("sysstat/vmstat-t-1.txt"), tz="Europe/Paris")["time"][0] == \
        t["time"][0] - 3600
    wide = parse_vmstat(S("sysstat/vmstat-nw-1.txt"))
    assert list(wide.columns[-7:]) == ["cs", "us", "sy", "id", "wa", "st", "gu"]


def test_vmstat_repeated_header() -> None:
    df = parse_vmstat(S("sysstat/vmstat-1-26.txt"))
    assert len(df) == 26 and df["sample"].tolist() == list(range(26))
    assert df.iloc[21][["bo", "in", "cs"]].tolist() == [7868, 830, 530]  # right after it


def test_vmstat_smartos() -> None:
    df = parse_vmstat(S("sysstat/seed004-smartos-vmstat-1.txt"))
    assert list(df.columns) == ["sample", "time", "r", "b", "w", "swap", "free", "re", "mf",
                                "pi", "po", "fr", "de", "sr", "rm", "s0", "s1", "zn", "in",
                                "syscalls", "cs", "us", "sy", "id"]  # fmt: skip
    assert len(df) == 7
    assert df.iloc[0][["rm", "syscalls", "cs", "us", "sy", "id"]].tolist() == [
        -5789, 68963, 14973, 10, 9, 81]


def test_vmstat_damaged() -> None:
    rel = "sysstat/vmstat-1-26.txt"
    _fails_at(parse_vmstat, _damaged(rel, 5, " 7  1      0 22396444  14316 1687708    0"), 5,
              "17 fields", "line 2")
    _fails_at(parse_vmstat, _damaged(rel, 6, " 4  1      0 22396444  14316 1687708    0    0 "
              "98304 90152 1359 2068 82 18  0  0  0.5"), 6, "integer", "'st'")
    _fails_at(parse_vmstat, _damaged(rel, 25, " r  b   swpd   free   buff  cache   si   so    "
              "bi    bo   in   cs us sy id wa xx"), 25, "same vmstat header")
    _fails_at(parse_vmstat, _damaged("sysstat/vmstat-t-1.txt", 3, "10  0      0 21939584  16632 "
              "1726932    0    0   913   837  468  773 18  3 78  0  0 2026-11-22 10:31"), 3,
              "timestamp")
    _fails_at(parse_vmstat, "no header\n1 2 3\n", 2, "vmstat header", "none found")


# --- iostat ------------------------------------------------------------------------------


def test_iostat_columns_units_and_times() -> None:
    kb = parse_iostat(S("sysstat/iostat-x-1-3.txt"))
    assert list(kb.columns[:6]) == ["sample", "time", "device", "r/s", "rkB/s", "rrqm/s"]
    assert kb["time"].isna().all() and kb.attrs["ncpu"] == 2 and kb.attrs["host"] == "vm"
    assert kb.iloc[1][["r/s", "rkB/s", "w/s", "wkB/s", "%util"]].tolist() == [
        106.0, 106540.0, 64.0, 136336.0, 20.8]
    mb = parse_iostat(S("sysstat/iostat-xmt-1-3.txt"), tz="UTC")
    assert mb.attrs["units"] == {"rkB/s": "rMB/s", "wkB/s": "wMB/s", "dkB/s": "dMB/s"}
    assert list(mb.columns) == list(kb.columns)
    assert mb["time"].tolist() == [_epoch(f"2026-11-22 10:31:{s}.0") for s in (22, 23, 24)]
    # recorded at the same time: the MB/s columns are the kB/s ones / 1024, to 2 decimals
    for c in ("rkB/s", "wkB/s", "dkB/s"):
        assert ((mb[c] - kb[c]).abs() <= 0.005 * 1024 + 1e-9).all(), c
    iso = parse_iostat(S("sysstat/iostat-xt-iso-2dev.txt"))  # the offset is in the text
    assert iso["time"].unique().tolist() == [_epoch(f"2026-11-22 10:31:{s}.0")
                                             for s in (43, 44, 45)]
    assert iso["device"].tolist() == ["vda", "zram0"] * 3
    basic = parse_iostat(S("sysstat/iostat-d-1-3.txt"))
    assert list(basic.columns[3:]) == ["tps", "kB_read/s", "kB_wrtn/s", "kB_dscd/s", "kB_read",
                                       "kB_wrtn", "kB_dscd"]  # fmt: skip
    cpu = parse_iostat_cpu(S("sysstat/iostat-x-1-3.txt"))
    assert cpu.iloc[1].tolist() == [1, math.nan, 86.5, 0, 13.5, 0, 0, 0] or (
        cpu.iloc[1]["%user"] == 86.5 and cpu.iloc[1]["%system"] == 13.5)


def test_iostat_totals_sum_devices() -> None:
    df = parse_iostat(S("sysstat/iostat-xt-iso-2dev.txt"))
    tot = iostat_totals(df)
    assert tot["devices"].tolist() == [2, 2, 2]
    for s in range(3):
        one = df[df["sample"] == s]
        for c in ("r/s", "rkB/s", "w/s", "wkB/s", "aqu-sz"):
            assert tot.iloc[s][c] == pytest.approx(one[c].sum())
        assert tot.iloc[s]["%util"] == one["%util"].max()
        # zram0 is idle: weighted awaits and request sizes are vda's (to its rounding)
        vda = one[one["device"] == "vda"].iloc[0]
        assert tot.iloc[s]["r_await"] == pytest.approx(vda["r_await"])
        assert tot.iloc[s]["rareq-sz"] == pytest.approx(vda["rareq-sz"], abs=0.01)
    only = iostat_totals(df, devices=["zram0"])
    assert (only["r/s"] == 0).all() and (only["devices"] == 1).all()


def _old_layout(kind: str) -> str:
    """The real ``iostat-x-1-3.txt`` reports re-expressed in an older sysstat layout.

    Every number comes from the real 12.6 recording (computed where the old layout has a
    column the new one lacks); only the layout is older. Not a recording of an old iostat.
    """
    df = parse_iostat(S("sysstat/iostat-x-1-3.txt"))
    if kind == "11.4-kB":
        hdr = ("Device:         rrqm/s   wrqm/s     r/s     w/s    rkB/s    wkB/s avgrq-sz "
               "avgqu-sz   await r_await w_await  svctm  %util")  # fmt: skip
    elif kind == "11.4-MB":
        hdr = ("Device:         rrqm/s   wrqm/s     r/s     w/s    rMB/s    wMB/s avgrq-sz "
               "avgqu-sz   await r_await w_await  svctm  %util")  # fmt: skip
    else:  # 2.6.18-era sectors, no r_await/w_await
        hdr = ("Device:         rrqm/s   wrqm/s     r/s     w/s   rsec/s   wsec/s avgrq-sz "
               "avgqu-sz   await  svctm  %util")  # fmt: skip
    out = ["Linux 6.18.44-fc-v595 (vm) \t11/22/26 \t_x86_64_\t(2 CPU)", ""]
    for _, r in df.iterrows():
        n = r["r/s"] + r["w/s"]
        kb = r["rkB/s"] + r["wkB/s"]
        vals = {"rrqm/s": r["rrqm/s"], "wrqm/s": r["wrqm/s"], "r/s": r["r/s"], "w/s": r["w/s"],
                "rkB/s": r["rkB/s"], "wkB/s": r["wkB/s"], "rMB/s": r["rkB/s"] / 1024,
                "wMB/s": r["wkB/s"] / 1024, "rsec/s": r["rkB/s"] * 2, "wsec/s": r["wkB/s"] * 2,
                "avgrq-sz": kb * 2 / n, "avgqu-sz": r["aqu-sz"],
                "await": (r["r/s"] * r["r_await"] + r["w/s"] * r["w_await"]) / n,
                "r_await": r["r_await"], "w_await": r["w_await"],
                "svctm": r["%util"] * 10 / n, "%util": r["%util"]}  # fmt: skip
        cols = hdr.split()[1:]
        out += [hdr, "vda " + " ".join(f"{vals[c]:8.2f}" for c in cols), "", ""]
    return "\n".join(out)


@pytest.mark.parametrize("kind", ["11.4-kB", "11.4-MB", "2.6-sectors"])
def test_iostat_older_sysstat_layouts(kind: str) -> None:
    new = parse_iostat(S("sysstat/iostat-x-1-3.txt"))
    old = parse_iostat(_old_layout(kind))
    assert "aqu-sz" in old.columns and "avgqu-sz" not in old.columns
    tol = 0.005 * (1024 if kind == "11.4-MB" else 1)
    for c in ("r/s", "w/s", "rkB/s", "wkB/s", "aqu-sz"):
        assert ((old[c] - new[c]).abs() <= tol + 1e-6).all(), c
    tot = iostat_totals(old)
    assert "svctm" not in tot.columns
    # recomputed from the summed rates (MB/s are rounded to 10 kB/s by the layout)
    rel = 2e-3 if kind == "11.4-MB" else 1e-5
    assert tot["avgrq-sz"].tolist() == pytest.approx(old["avgrq-sz"].tolist(), rel=rel, abs=0.01)


def test_iostat_pretty_puts_the_device_last() -> None:
    text = ("Linux 6.18.44-fc-v595 (vm) \t11/22/26 \t_x86_64_\t(2 CPU)\n\n"
            "     r/s     rkB/s Device\n   82.97   1820.35 vda\n")  # fmt: skip
    df = parse_iostat(text)
    assert df[["device", "r/s", "rkB/s"]].values.tolist() == [["vda", 82.97, 1820.35]]


def test_iostat_damaged() -> None:
    rel = "sysstat/iostat-x-1-3.txt"
    row = S(rel).read_text().split("\n")[13]  # vda of the second report
    _fails_at(parse_iostat, _damaged(rel, 14, row.rsplit(" ", 1)[0]), 14, "23 fields", "line 13")
    _fails_at(parse_iostat, _damaged(rel, 14, row.replace("106540.00", "104.0M")), 14,
              "a number in column 'rkB/s'")
    _fails_at(parse_iostat, _damaged(rel, 10, "garbage here"), 10, "iostat report line")
    _fails_at(parse_iostat, _damaged(rel, 4, "          17.87    0.62    3.03"), 4, "6 avg-cpu")
    _fails_at(parse_iostat, "Device r/s\nvda 1\n", 2, "banner")
    _fails_at(parse_iostat, "Linux 6.18 (vm) \t11/22/26 \t_x86_64_\t(2 CPU)\n", 1, "Device")


# --- mpstat ------------------------------------------------------------------------------


def test_mpstat() -> None:
    df = parse_mpstat(S("sysstat/mpstat-P-ALL-1-3.txt"), tz="UTC")
    assert list(df.columns) == ["time", "sample", "cpu", "%usr", "%nice", "%sys", "%iowait",
                                "%irq", "%soft", "%steal", "%guest", "%gnice", "%idle"]
    assert df["cpu"].tolist() == ["all", "0", "1"] * 3
    assert df["time"].unique().tolist() == [_epoch(f"2026-11-22 10:31:{s}.0") for s in (23, 24, 25)]
    for s, g in df.groupby("sample"):  # "all" is the mean of the CPUs, to mpstat's rounding
        cpus = g[g["cpu"] != "all"]
        assert g[g["cpu"] == "all"]["%usr"].iloc[0] == pytest.approx(cpus["%usr"].mean(), abs=0.6)
    avg = parse_mpstat(S("sysstat/mpstat-P-ALL-1-3.txt"), averages=True)
    a = avg[avg["sample"] == -1]
    assert a["time"].isna().all() and a["%usr"].tolist() == [87.35, 80.33, 94.35]
    assert df.attrs["ncpu"] == 2


def test_mpstat_12_hour_clock_and_midnight() -> None:
    text = ("Linux 6.18 (vm) \t11/22/26 \t_x86_64_\t(2 CPU)\n\n"
            "11:59:59 PM  CPU    %usr   %idle\n12:00:00 AM  all   10.00   90.00\n\n"
            "12:00:00 AM  CPU    %usr   %idle\n12:00:01 AM  all   20.00   80.00\n")  # fmt: skip
    df = parse_mpstat(text, tz="UTC")
    assert df["time"].tolist() == [_epoch("2026-11-23 00:00:00.0"), _epoch("2026-11-23 00:00:01.0")]
    text2 = text.replace("12:00:00 AM  all", "11:59:59 PM  all", 1)
    assert parse_mpstat(text2, tz="UTC")["time"].tolist()[0] == _epoch("2026-11-22 23:59:59.0")


def test_mpstat_damaged() -> None:
    rel = "sysstat/mpstat-P-ALL-1-3.txt"
    lines = S(rel).read_text().split("\n")
    _fails_at(parse_mpstat, _damaged(rel, 5, lines[4].rsplit(" ", 1)[0]), 5, "11 fields")
    _fails_at(parse_mpstat, _damaged(rel, 5, lines[4].replace("79.00", "79,00")), 5, "'%usr'")
    _fails_at(parse_mpstat, _damaged(rel, 8, "CPU load was high"), 8, "mpstat line")
    prompt = "$ mpstat -P ALL 1 3\n" + S(rel).read_text()  # text before the banner is fine
    assert len(parse_mpstat(prompt)) == 9
    _fails_at(parse_mpstat, _damaged(rel, 8, lines[7].replace("%gnice", "%other")), 8,
              "same header as line 3")


# --- pidstat -----------------------------------------------------------------------------


def test_pidstat_tables_are_joined() -> None:
    df = parse_pidstat(S("sysstat/pidstat-udwr-p-1-3.txt"), tz="UTC")
    assert list(df.columns[:7]) == ["time", "sample", "uid", "pid", "tid", "thread", "command"]
    assert len(df) == 3 and df["pid"].unique().tolist() == [1064]
    assert df.iloc[0][["%CPU", "RSS", "kB_rd/s", "kB_wr/s", "cswch/s"]].tolist() == [
        41.0, 35816, 106496.0, 114688.0, 0.0]
    assert str(df["RSS"].dtype) == "Int64" and str(df["%CPU"].dtype) == "float64"
    assert df["time"].tolist() == [_epoch(f"2026-11-22 10:31:{s}.0") for s in (23, 24, 25)]
    avg = parse_pidstat(S("sysstat/pidstat-udwr-p-1-3.txt"), averages=True)
    assert avg.iloc[-1]["sample"] == -1 and avg.iloc[-1]["CPU"] is pd.NA


@pytest.mark.parametrize("rel", ["sysstat/pidstat-t-udwr-p-1-3.txt",
                                 "sysstat/pidstat-hHt-udwr-p-1-3.txt"])
def test_pidstat_threads_add_up_to_their_process(rel: str) -> None:
    df = parse_pidstat(S(rel), tz="UTC")
    assert df["thread"].sum() == 12 and (~df["thread"]).sum() == 3
    assert df[df["thread"]]["command"].unique().tolist() == ["python3"]
    for _, g in df.groupby("sample"):
        proc, thr = g[~g["thread"]].iloc[0], g[g["thread"]]
        assert proc["tid"] is pd.NA and (thr["pid"] == proc["pid"]).all()
        for c in ("kB_rd/s", "kB_wr/s"):  # (%usr is not: pidstat rounds per thread)
            assert thr[c].sum() == pytest.approx(proc[c], abs=0.011), c


def test_pidstat_epoch_clock() -> None:
    df = parse_pidstat(S("sysstat/pidstat-hHt-udwr-p-1-3.txt"))  # no tz needed with -H
    assert df["time"].unique().tolist() == [1795344318.0, 1795344319.0, 1795344320.0]
    h = parse_pidstat(S("sysstat/pidstat-h-udwr-p-1-3.txt"), tz="UTC")
    assert h["time"].tolist() == [_epoch(f"2026-11-22 10:45:{s}.0") for s in (18, 19, 20)]


def test_pidstat_damaged() -> None:
    rel = "sysstat/pidstat-t-udwr-p-1-3.txt"
    lines = S(rel).read_text().split("\n")
    _fails_at(parse_pidstat, _damaged(rel, 6, lines[5].replace("65.00", "6x")), 6, "'%wait'")
    _fails_at(parse_pidstat, _damaged(rel, 4, lines[4]), 4, "PID/TGID")  # a thread row first
    _fails_at(parse_pidstat, _damaged(rel, 13, "10:31:23        0      1064"), 13, "9 fields",
              "line 10")


# --- insert benchmark --------------------------------------------------------------------


def test_insert_benchmark_long_and_wide() -> None:
    df = parse_insert_benchmark(S("insert_benchmark/seed001-server32730-tables.txt"))
    assert list(df.columns) == ["table", "title", "row", "engine", "column", "text", "value"]
    t = wide_tables(df)
    assert len(t) == 4
    assert list(t[0].columns) == ["engine", "ips.av", "qps.av", "wkb/i", "Mcpu/q", "size",
                                  "rss", "wmb/s", "cpu"]  # fmt: skip
    assert t[0].iloc[0].tolist() == ["WiredTiger-3.6.0", 1584, 31386, 36.09, 1184, 116, 103.5,
                                     57.2, 37.2]  # fmt: skip
    assert t[1].attrs["title"].startswith("And for ioBound-none")
    seed0 = wide_tables(parse_insert_benchmark(S("insert_benchmark/seed000-io-cpu-tables.txt")))
    assert [w.attrs["title"] for w in seed0] == ["0i.10q", "0i.10q", "10i.0q", "10i.0q"]
    assert seed0[1]["engine"].tolist() == ["toku", "wired", "mmap", "rocks"]
    assert seed0[1]["(us+sy)/o"].tolist() == [0.085, 0.003121, 0.003264, 0.003104]
    assert seed0[2]["ips"].iloc[0] == 43667 and seed0[2]["r/s"].iloc[0] == 587


def test_respaced_seed_tables_keep_every_character() -> None:
    glued = S("insert_benchmark/seed000-glued-tables.txt").read_text().split("\n")
    spaced = S("insert_benchmark/seed000-ips-qps-tables.txt").read_text().split("\n")
    assert len(glued) == len(spaced)
    for g, s in zip(glued, spaced):
        assert "".join(s.split()) == "".join(g.split())
        if g and " " not in g:  # a glued row or header: the same characters, spaces added
            assert s.replace(" ", "") == g


def test_respaced_tables_agree_with_the_seeds_other_tables() -> None:
    ips_qps = {w.attrs["title"]: w.set_index("engine") for w in wide_tables(
        parse_insert_benchmark(S("insert_benchmark/seed000-ips-qps-tables.txt")))}
    io_cpu = wide_tables(parse_insert_benchmark(S("insert_benchmark/seed000-io-cpu-tables.txt")))
    name = {"toku": "tokumx", "wired": "wiredtiger", "wt": "wiredtiger", "mmap": "mmapv1",
            "rocks": "rocksdb"}  # fmt: skip
    for w, key, col in ((io_cpu[0], "0i.10q", "qps"), (io_cpu[2], "10i.0q", "ips")):
        for eng, v in zip(w["engine"], w[col]):
            assert ips_qps[key].loc[name[eng], col + "Avg"] == v
    # the seed's P95 is the low tail: below the average wherever there were inserts
    for t in ips_qps.values():
        on = t[t["ipsAvg"] > 0]
        assert (on["ipsP95"] < on["ipsAvg"]).all()
    mmap = ips_qps["10i.1q"].loc["mmapv1"]
    assert math.isnan(mmap["dbSize"]) and mmap["rssSize"] == 70


def test_glued_seed_tables_are_refused_at_the_header() -> None:
    e = _fails_at(parse_insert_benchmark, S("insert_benchmark/seed000-glued-tables.txt")
                  .read_text(), 3, "glued")  # fmt: skip
    assert "ipsAvgipsP95" in str(e)


def test_insert_benchmark_hist() -> None:
    df = parse_insert_benchmark_hist(S("insert_benchmark/seed001-server32730-hist.txt"))
    assert list(df.columns) == ["hist", "label", "bucket", "lo_us", "hi_us", "count", "max_s"]
    wt = df[df["label"] == "WiredTiger"]
    assert wt["count"].sum() == 136 + 3348 + 46516 and wt["max_s"].iloc[0] == 0.946401
    assert wt["bucket"].tolist() == ["256us", "1ms", "4ms", "16ms", "64ms", "256ms", "1s",
                                     "4s", "16s", "gt"]  # fmt: skip
    assert wt[["lo_us", "hi_us"]].iloc[[0, 6, 9]].values.tolist() == [
        [0, 256], [256000, 1e6], [16e6, math.inf]]
    # the max lies in the last non-empty bucket, as it must
    for _, g in df.groupby("hist"):
        last = g[g["count"] > 0].iloc[-1]
        assert last["lo_us"] < g["max_s"].iloc[0] * 1e6 <= last["hi_us"]
    # iibench.py's own prefix form ("Insert rt:" before the header and the row)
    text = ("Insert rt:     256us       1ms        gt         max\n"
            "Insert rt:         1         2         0    0.000900\n")  # fmt: skip
    p = parse_insert_benchmark_hist(text)
    assert p["label"].unique().tolist() == ["Insert rt:"] and p["count"].tolist() == [1, 2, 0]


def test_insert_benchmark_damaged() -> None:
    rel = "insert_benchmark/seed000-io-cpu-tables.txt"
    _fails_at(parse_insert_benchmark, _damaged(rel, 5, "wired   8750     4756    47.9   0.6"),
              5, "engine name and 7 cells", "line 3")
    _fails_at(parse_insert_benchmark, _damaged(rel, 4, "toku     850     2122    32.0   1.4   "
              "   2.50    38.6   x1.7"), 4)
    _fails_at(parse_insert_benchmark, "some prose\n", 1, "none found")
    h = "insert_benchmark/seed001-server32730-hist.txt"
    _fails_at(parse_insert_benchmark_hist, _damaged(h, 6, "    0         0         0   136"),
              6, "10 counts")


# --- phase markers -----------------------------------------------------------------------


def test_phase_markers_format() -> None:
    text = "\n".join([
        "### load uri=mongodb://x/",
        marker("start", "10i.0q", 1795344053.520075),
        "1795344054.521 10i.0q 1.001 86.9",
        "  ### phase start name=0i.10q",
        marker("end", "10i.0q", 1795344055.5),
        "### phase end name=0i.10q   ",
        marker("start", "10i.0q", 1795344060),
    ])  # fmt: skip
    df = parse_phase_markers(text.split("\n"), receive_times=[0, 0, 0, 1795344054.0, 0,
                                                              1795344058.25, 0])  # fmt: skip
    assert list(df.columns) == ["name", "start", "end"]
    assert df["name"].tolist() == ["10i.0q", "0i.10q", "10i.0q"]
    assert df["start"].tolist() == [1795344053.520075, 1795344054.0, 1795344060.0]
    assert df["end"].tolist()[:2] == [1795344055.5, 1795344058.25]
    assert math.isnan(df["end"].iloc[2])  # still running when the input ended
    assert marker("end", "x", 12.5) == "### phase end name=x time=12.5"
    assert parse_phase_markers("no markers\nat all\n").empty


def test_phase_markers_of_the_load_driver() -> None:
    out = S("load/run-ferretdb/load.stdout")
    df = parse_phase_markers(out)
    assert len(df) >= 1 and (df["end"] > df["start"]).all()
    assert (df["start"].iloc[1:].to_numpy() >= df["end"].iloc[:-1].to_numpy()).all()
    assert registry.detect(out.read_text()) == "phase-markers"


def test_phase_markers_damaged() -> None:
    p = parse_phase_markers
    _fails_at(p, "x\n### phase begin name=a time=1\n", 2, "start|end")
    _fails_at(p, "### phase start name=a time=1\n### phase start name=a time=2\n", 2,
              "end before it starts again")
    _fails_at(p, "### phase end name=a time=1\n", 1, "start marker")
    _fails_at(p, "### phase start name=a time=5\n### phase end name=a time=4\n", 2, "end time")
    _fails_at(p, "### phase start name=a\n", 1, "receive times")
    _fails_at(p, "### phase start name=a time=1e9\n", 1)
    with pytest.raises(ValueError):
        marker("start", "two words")


# --- the subcommands ---------------------------------------------------------------------


def _cli(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "analyzer"), "TZ": "UTC"}
    return subprocess.run([sys.executable, "-m", "mongoprobe", *args], capture_output=True,
                          text=True, cwd=ROOT, env=env, input=stdin, timeout=120)


def test_cli_parse_csv_is_the_golden() -> None:
    r = _cli("parse", "ycsb", "samples/ycsb/ycsb-0.17-load.status.txt", "--csv", "--tz", "UTC")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout == (golden.EXPECTED / golden_path("ycsb/ycsb-0.17-load.status.txt", "ycsb")).read_text()


def test_cli_parse_json_records_and_auto() -> None:
    r = _cli("parse", "auto", "samples/sysstat/iostat-xt-iso-2dev.txt", "--json")
    assert (r.returncode, r.stderr) == (0, "")
    recs = json.loads(r.stdout)
    assert isinstance(recs, list) and len(recs) == 6
    assert recs[0]["device"] == "vda" and recs[0]["r/s"] == 83.33
    r = _cli("parse", "ycsb", "samples/ycsb/ycsb-0.17-workloada-run.status.txt", "--json")
    last = json.loads(r.stdout)[-3]
    assert last["op"] == "READ" and last["count"] == 0 and last["avg_us"] is None


def test_cli_parse_stdin_and_table() -> None:
    text = S("sysstat/vmstat-t-1.txt").read_text()
    r = _cli("parse", "vmstat", "-", stdin=text)
    assert r.returncode == 0 and r.stderr == ""
    assert all(len(line) <= 79 for line in r.stdout.splitlines())
    assert "2026-11-22 10:31:22.000" in r.stdout  # epoch seconds shown as UTC


def test_cli_parse_damaged_input_one_line_and_exit_1(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text(_damaged("sysstat/vmstat-1.txt", 4, " 6  0      0 21939584"))
    r = _cli("parse", "vmstat", str(bad))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and f"{bad}:4: expected 17 fields" in r.stderr
    r = _cli("parse", "auto", str(bad.with_name("missing.txt")))
    assert r.returncode == 1 and "No such file" in r.stderr
    r = _cli("parse", "nosuchformat", str(bad))
    assert r.returncode == 2


def test_cli_quantize_ycsb_per_op() -> None:
    r = _cli("quantize", "samples/ycsb/ycsb-0.17-load.status.txt")
    assert (r.returncode, r.stderr) == (0, "")
    lines = r.stdout.splitlines()
    assert lines[0].startswith("p99_us in usecs, by op")
    assert "op = INSERT   count 16" in r.stdout and "op = CLEANUP   count 2" in r.stdout
    assert "value  ------------- Distribution ------------- count" in r.stdout
    # the p99s of the 16 INSERT intervals: 19183 .. 102015 us -> 16384 .. 65536 buckets
    assert "           16384 |" in r.stdout and "           65536 |" in r.stdout
    ms = _cli("quantize", "samples/ycsb/ycsb-0.17-load.status.txt", "-c", "max_us",
              "--unit", "ms", "--by", "none")
    assert ms.returncode == 0 and "max_us in msecs" in ms.stdout and "count 18" in ms.stdout


def test_cli_quantize_events_and_printed_histograms() -> None:
    r = _cli("quantize", "samples/probes/mongo_snoop-ferretdb.txt", "--unit", "us")
    assert (r.returncode, r.stderr) == (0, "")
    assert r.stdout.startswith("latency_ns in usecs, by command") and "command = " in r.stdout
    r = _cli("quantize", "samples/quantize/dtrace-mongo_time-load.txt")
    assert r.returncode == 0 and "304521" in r.stdout
    r = _cli("quantize", "samples/sysstat/vmstat-1.txt")
    assert r.returncode == 1 and "no latency column" in r.stderr


def test_parse_cli_registers_both_commands() -> None:
    import argparse

    from mongoprobe.cli import parse as parse_cli

    p = argparse.ArgumentParser()
    parse_cli.register(p.add_subparsers(dest="cmd"))
    a = p.parse_args(["parse", "auto", "f", "--json"])
    assert a.func is parse_cli.cmd_parse and a.json
    a = p.parse_args(["quantize", "f", "--column", "p99_us", "--unit", "ms"])
    assert a.func is parse_cli.cmd_quantize and (a.column, a.unit) == ("p99_us", "ms")
    with pytest.raises(SystemExit):
        p.parse_args(["parse", "auto", "f", "--json", "--csv"])


def test_registry_parse_drops_options_a_parser_lacks() -> None:
    df = registry.parse("ycsb-summary", io.StringIO(
        S("ycsb/ycsb-0.17-workloada-run.summary.txt").read_text()), "s.txt", tz="UTC")
    assert len(df) == 31


def test_every_cli_example_on_a_sample_runs() -> None:
    from mongoprobe.cli import parse as parse_cli

    lines = [ln.strip() for ln in (parse_cli.PARSE_EXAMPLES + parse_cli.QUANTIZE_EXAMPLES)
             .splitlines() if ln.strip().startswith("mongoprobe ")]  # fmt: skip
    ran = 0
    for ln in lines:
        argv = ln.split("#")[0].split()[1:]
        if not any(a.startswith("samples/") for a in argv):
            continue  # (events.jsonl: a file of the user's)
        r = _cli(*argv)
        assert r.returncode == 0 and r.stderr == "", (ln, r.stderr)
        ran += 1
    assert ran >= 8


# --- stack formats in the registry ------------------------------------------------------


@pytest.mark.parametrize("case", sorted(p.name for p in (SAMPLES / "stacks").iterdir()
                                        if p.name.startswith(("perf-", "bpftrace-", "dtrace-"))))
def test_stack_samples_detect_and_parse_through_the_registry(case: str) -> None:
    """One registry for every format: a stack sample is detected as its stack format,
    and parsing it gives the stack-sample table with the same totals as the folder."""
    from mongoprobe.model import stack_samples as stacks

    path = SAMPLES / "stacks" / case
    want = stacks.FORMATS[case.split("-")[0]]
    assert registry.detect(path.read_text(errors="replace")[:65536], kind="stacks") == want
    df = registry.parse(want, path)
    assert list(df.columns) == ["time", "second", "pid", "tid", "comm", "frames", "count",
                                "weight"]
    assert df["weight"].sum() == sum(stacks.fold(path).values())
