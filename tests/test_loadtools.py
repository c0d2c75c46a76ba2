"""Load-tool adapters (mongoprobe.loadtools) on real outputs, and the phase rows the one
phase model (mongoprobe.analysis.phase_table) computes from them.

Goldens: tests/expected/loadtools/ (tests/golden.py: MONGOPROBE_BLESS=1 re-blesses)."""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from helpers.cli import mp
from helpers.run_copies import drop_events
import mongoprobe
from mongoprobe import loadtools
from mongoprobe.analysis import phase_table as phases, traffic_phases as traffic
from mongoprobe.formats import loadout, phase_markers
from mongoprobe.formats.ycsb import parse_ycsb_summary

from golden import check_json

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


def read(path: Path | str, text: str | None = None) -> loadtools.ToolOutput:
    out = loadout.read_output(text if text is not None else Path(path).read_text())
    tool, _ = loadtools.read_output(out, str(path))
    assert tool is not None, path
    return tool


def row_of(tool: loadtools.ToolOutput) -> list[dict]:
    t = phases.compute(phases.Inputs(tool, None, None, None, None, None, None))
    return [{k: phases._clean(v) for k, v in r.items()} for r in t.to_dict(orient="records")]


def golden(name: str, data) -> None:
    check_json(f"loadtools/{name}", data)


# --- iibench ---------------------------------------------------------------------------


def test_iibench_sample_phase_row() -> None:
    path = SAMPLES / "iibench/iibench-mongo-1i-1q-30k.stdout.txt"
    tool = read(path)
    assert tool.tool == "iibench" and tool.phases["name"].tolist() == ["iibench"]
    # no receive times in a plain capture: t_sec is the clock, the phase is 30 intervals
    assert (tool.phases["start"].iloc[0], tool.phases["end"].iloc[0]) == (0.0, 30.0)
    iv = tool.intervals
    ins, qry = iv[iv["op"] == "insert"], iv[iv["op"] == "query"]
    assert ins["count"].sum() == 30000 and len(ins) == 30    # = Totals: 30000 rows
    assert qry["count"].sum() == 96                          # t_query: steps of 16
    assert (qry["count"] % 16 == 0).all()
    tot = tool.totals.set_index("op")
    assert tot.loc["insert", "operations"] == 30000 and tot.loc["query", "operations"] == 112
    cl = tool.client.set_index("op")
    assert cl.loc["insert", "count"] == 30          # insert commands of 1,000 rows each
    assert cl.loc["query", "count"] == 112 and cl.loc["query", "max_us"] == 1653138
    row = row_of(tool)[0]
    assert row["ips_avg"] == 1000.0                 # documents/s, as the benchmark counts
    i_ips = sorted(pd.read_csv(ROOT / "tests/expected/formats/iibench/"
                               "iibench-mongo-1i-1q-30k.stdout.iibench.csv")["i_ips"])
    assert row["ips_p95"] == i_ips[1]               # nearest rank: 2nd slowest of 30
    assert row["rate_units"] == {"insert": "documents", "query": "operations"}
    assert row["client_ms"]["insert"] == {"count": 30, "p95_le_ms": 193.524,
                                          "max_ms": 193.524}
    golden("iibench-mongo-1i-1q-30k.phase.json", row)


# --- YCSB ------------------------------------------------------------------------------


def _ycsb_both() -> str:
    # stderr (status lines) then stdout (summaries), as two captured files joined
    d = SAMPLES / "ycsb"
    return ((d / "ycsb-0.17-ferretdb-load+run.stderr.txt").read_text()
            + (d / "ycsb-0.17-ferretdb-load+run.stdout.txt").read_text())


def test_ycsb_017_each_invocation_is_a_phase_with_its_own_throughput() -> None:
    tool = read("ycsb-both", _ycsb_both())
    assert tool.tool == "ycsb" and tool.version == "0.17.0"
    assert tool.phases["name"].tolist() == ["load", "workloada"]
    assert tool.phases["label"].str.endswith((" -load", " -t")).all()
    sm = parse_ycsb_summary(SAMPLES / "ycsb/ycsb-0.17-ferretdb-load+run.stdout.txt")
    throughput = sm.loc[sm["stat"] == "throughput_ops_per_s", "value"].tolist()
    operations = sm[sm["stat"] == "operations"]
    rows = {r["name"]: r for r in row_of(tool)}
    for (name, r), tp in zip(rows.items(), throughput):
        assert r["ops_avg"] == pytest.approx(tp, rel=0.05), name
    # the intervals' per-operation counts add up to YCSB's own Operations
    counts = tool.intervals.groupby(["phase", "op"])["count"].sum().to_dict()
    assert counts == {("load", "INSERT"): 2000, ("workloada", "READ"): 2961,
                      ("workloada", "UPDATE"): 3039}
    assert set(operations["value"]) >= {2000, 2961, 3039}
    assert "CLEANUP" not in set(tool.intervals["op"])
    assert rows["load"]["ips_avg"] == pytest.approx(rows["load"]["ops_avg"])
    assert rows["load"]["qps_avg"] is None           # no query operation in a load
    assert rows["workloada"]["qps_avg"] == pytest.approx(
        rows["workloada"]["rates"]["READ"])
    assert rows["workloada"]["ips_avg"] is None
    c = rows["workloada"]["client_latency_us"]["UPDATE"]
    assert c == {"count": 3039, "avg": 121299.31556433038, "p50": None, "p95": 380671.0,
                 "p99": 1261567.0, "max": 2545663.0}
    # the first and last intervals are partial or warm-up; p95 uses the full ones
    full = tool.intervals[tool.intervals["full"]]
    assert 0 < len(full) < len(tool.intervals)


def test_ycsb_01_seed_old_status_lines() -> None:
    load = read(SAMPLES / "ycsb/seed004-ycsb-0.1-load.txt")
    p = load.phases.iloc[0]
    # the '0 sec' line starts it, RunTime(ms) 771609 is its length (the seed elides lines)
    assert (p["name"], p["start"], p["end"]) == ("load", 0.0, 771.609)
    assert set(load.intervals["op"]) == {"INSERT"}  # one operation: the total is its count
    row = row_of(load)[0]
    assert row["ops_avg"] == pytest.approx(6000000 / 771.609 * 5376306 / 6000000)
    assert row["client_latency_us"]["INSERT"]["count"] == 6000000
    run = read(SAMPLES / "ycsb/seed004-ycsb-0.1-workloada-run.txt")
    assert run.phases["name"].tolist() == ["workloada"]
    assert set(run.intervals["op"]) == {loadtools.ALL}   # READ and UPDATE, no split
    row = row_of(run)[0]
    assert row["rates"] == {} and row["ops_avg"] > 0
    assert set(row["client_latency_us"]) == {"READ", "UPDATE"}


# --- the built-in load, markers, nothing recognised ------------------------------------


def test_builtin_load_run_sample() -> None:
    run = mongoprobe.load_run(SAMPLES / "load/run-ferretdb")
    assert run.tool_output.tool == "mongoprobe-load"
    assert [t[0] for t in run.tool_tried] == []
    t = phases.phase_table(run)
    summary = {p["name"]: p for p in run.load_summary["phases"]}
    for r in t.itertuples():
        s = summary[r.name]
        assert r.ips_avg == pytest.approx(s["inserts"] / s["seconds"])
        assert r.qps_avg == pytest.approx(s["queries"] / s["seconds"])
        assert r.ops_avg == pytest.approx((s["inserts"] + s["queries"]) / s["seconds"])
        # the server's find and insert counts of the phase equal the tool's
        assert round(r.server_rates.get("find", 0) * r.seconds) == s["queries"]
        assert round(r.server_rates.get("insert", 0) * r.seconds) == s["inserts"]
        assert set(r.client_vs_server) == {k for k, n in (("insert", "inserts"),
                                                           ("query", "queries")) if s[n]}
    j = phases.phase_json(run)
    assert j["lost"]["probe"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                                  "malformed": 0, "dropped": 0}
    assert j["tool"]["name"] == "mongoprobe-load"
    for p in j["phases"]:
        for d in p["latency_us"].values():
            assert set(d) == {"count", "avg", "p50", "p95", "p99", "max"}


def _copy_run(tmp_path: Path, keep) -> Path:
    """The sample run with load.out cut down to the lines ``keep`` accepts."""
    dst = tmp_path / "run"
    shutil.copytree(SAMPLES / "load/run-ferretdb", dst)
    lines = (dst / "load.out").read_text().splitlines(keepends=True)
    (dst / "load.out").write_text("".join(s for s in lines if keep(s.split("\t", 2)[2])))
    return dst


def test_markers_alone_give_phases_and_server_throughput(tmp_path) -> None:
    # the load's own header gone: only its markers say where the phases are
    run = mongoprobe.load_run(_copy_run(tmp_path, lambda s: not s.startswith("### load")))
    assert run.tool_output.tool == "markers"
    assert run.tool_tried[0][0] == "mongoprobe-load"
    want = phase_markers.parse_phase_markers(SAMPLES / "load/run-ferretdb/load.stdout")
    assert run.phases["name"].tolist() == want["name"].tolist()
    t = phases.phase_table(run)
    assert (t["ops_source"] == "server").all()
    for r in t.itertuples():
        work = sum(v for k, v in r.server_rates.items() if k not in traffic.ADMIN_COMMANDS)
        assert r.ops_avg == pytest.approx(work) and math.isnan(r.ips_avg)


@pytest.mark.parametrize("events", [True, False], ids=["events", "histograms"])
def test_traffic_finds_mix_changes_when_nothing_else_does(tmp_path, events) -> None:
    path = _copy_run(tmp_path, lambda s: not s.startswith("###"))
    if not events:      # as recorded without --events: the per-second histograms alone
        drop_events(path)
    run = mongoprobe.load_run(path)
    assert (run.events is not None) == events
    assert run.tool_output.tool == "traffic"
    assert [a for a, _ in run.tool_tried] == list(loadtools.ADAPTERS)
    got = run.phases
    want = phase_markers.parse_phase_markers(SAMPLES / "load/run-ferretdb/load.stdout")
    # 2i.1q and 1i@50.2q have one mix (inserts and finds): traffic cannot split them;
    # 0i.2q (finds alone) starts a phase within a second of its marker
    assert got["name"].tolist() == ["insert+find", "find"]   # busiest first
    assert abs(got["start"].iloc[0] - want["start"].iloc[0]) < 1.0
    assert abs(got["start"].iloc[1] - want["start"].iloc[2]) < 1.0
    assert abs(got["end"].iloc[1] - want["end"].iloc[2]) < 1.0
    text = phases.render(phases.phase_table(run), phases.tool_json(run), run.lost)
    assert text.startswith("phases from traffic (no adapter read the tool's output:")
    assert max(len(s) for s in text.splitlines()) < 80
    assert "ycsb (no status lines" in " ".join(text.split())


def test_nothing_recognised_names_every_adapter() -> None:
    tool, tried = loadtools.read_output(loadout.read_output("hello\nworld\n"))
    assert tool is None and [a for a, _ in tried] == list(loadtools.ADAPTERS)
    assert all(why for _, why in tried)


def test_phases_override(tmp_path) -> None:
    run = mongoprobe.load_run(SAMPLES / "load/run-ferretdb")
    t0 = run.manifest["start"]
    a, b = (round(x - t0, 3) for x in run.phases["start"].iloc[[0, 2]])
    ov = phases.parse_phases(f"a={a}..{b},b={b}..{b + 2}", t0)
    assert ov["start"].tolist() == [t0 + a, t0 + b] and ov["end"].tolist()[0] == t0 + b
    t = phases.phase_table(run, ov)
    assert t["name"].tolist() == ["a", "b"]
    # the tool's intervals move to the phase their end falls in
    iv = run.tool_output.intervals
    n_a = iv[(iv["time"] > t0 + a) & (iv["time"] <= t0 + b) & (iv["op"] == "insert")]
    assert n_a["count"].sum() > 0
    assert t["ips_avg"].iloc[0] == pytest.approx(n_a["count"].sum() / (b - a))
    for bad in ("a=1..x", "a", "=1..2", "a=5..1"):
        with pytest.raises(phases.PhaseError):
            phases.parse_phases(bad, t0)


def test_cli_phases_and_parse_on_a_run() -> None:
    run = SAMPLES / "load/run-ferretdb"
    r = mp("phases", str(run))
    assert r.returncode == 0, r.stderr
    assert "phases from the load tool's output: mongoprobe-load" in r.stdout
    assert "lost: unmatched replies 0" in r.stdout
    r = mp("phases", str(run), "--phases", "x=3..1")
    assert r.returncode == 1 and r.stderr.count("\n") == 1 and "--phases" in r.stderr
    r = mp("report", str(run), "--diff", "no-such-phase", "2i.1q", "-o", os.devnull)
    assert r.returncode == 1 and "no phase 'no-such-phase'" in r.stderr
    # parse reads a run's load.out (the stamps off) as well as the tool's own output
    r = mp("parse", "mongoprobe-load", str(run / "load.out"), "--csv")
    assert r.returncode == 0, r.stderr
    assert r.stdout == mp("parse", "mongoprobe-load", str(run / "load.stdout"), "--csv").stdout
