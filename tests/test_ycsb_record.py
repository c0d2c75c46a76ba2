"""YCSB itself, unmodified, under `mongoprobe record` against the embedded FerretDB:
a load then a workloada run, found as two phases in YCSB's own output, with YCSB's
throughput, operation counts and client latency beside the server's.

Needs root and bpftrace (the latency probe), the FerretDB that setup builds, Java, and
YCSB 0.17 with its MongoDB binding from the project's shared folder (``../shared/ycsb``
beside the repository, or ``$MONGOPROBE_SHARED/ycsb``): each test skips with the
reason where one is missing."""

from __future__ import annotations

import json
import os
import shlex
import shutil
from pathlib import Path

import pytest

from helpers.cli import mp
import mongoprobe
from mongoprobe.formats.ycsb import parse_ycsb_summary

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("MONGOPROBE_SHARED", ROOT.parent / "shared"))
YCSB = SHARED / "ycsb"
RECORDS, OPERATIONS = 1000, 600


def ycsb(mode: str, workload: str = "workloada") -> str:
    cp = f"{YCSB}/lib/*:{YCSB}/mongodb-binding/lib/*"
    args = ["java", "-cp", cp, "site.ycsb.Client", mode, "-db", "site.ycsb.db.MongoDbClient",
            "-P", f"{YCSB}/workloads/{workload}", "-p", f"recordcount={RECORDS}",
            "-p", f"operationcount={OPERATIONS}", "-threads", "4", "-s",
            "-p", "status.interval=1"]
    # the URI comes from record's environment, as YCSB's README shows it
    return " ".join(map(shlex.quote, args)) + ' -p mongodb.url="${MONGOPROBE_URI}ycsb?w=1"'


@pytest.fixture(scope="module")
def run(tmp_path_factory, tracing_and_target):
    if not (YCSB / "lib").is_dir():
        pytest.skip(f"{YCSB}: no YCSB here (the project's shared folder is absent; "
                    "MONGOPROBE_SHARED names another)")
    if shutil.which("java") is None:
        pytest.skip("no java on PATH (YCSB needs Java 17)")
    path = tmp_path_factory.mktemp("ycsb") / "RUN"
    script = f"set -e\n{ycsb('-load')}\n{ycsb('-t')}\n"
    # --events: every request kept, so the server's counts per phase are exact; the
    # probes the verdict reads (offcpu, treestat's record of it all) for its test
    r = mp("record", "--target", "embedded", "-o", str(path), "--probes",
           "latency,offcpu,vmstat,iostat,pidstat", "--events", "--", "sh", "-c", script,
           timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return path


@pytest.fixture(scope="module")
def phases_json(run) -> dict:
    """``phases RUN --json`` of the run, read once by the tests that check it."""
    r = mp("phases", str(run), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_phases_come_from_ycsbs_own_output(run, phases_json):
    j = phases_json
    assert j["tool"]["name"] == "ycsb" and j["tool"]["version"] == "0.17.0"
    ph = {p["name"]: p for p in j["phases"]}
    assert list(ph) == ["load", "workloada"]
    assert all(p["tool"] == "ycsb" for p in ph.values())
    # each phase's throughput is YCSB's own [OVERALL] Throughput(ops/sec)
    rec = mongoprobe.load_run(run)
    stdout = "\n".join(rec.load_lines.loc[rec.load_lines["stream"] == "stdout", "text"])
    sm = parse_ycsb_summary(stdout + "\n")
    tp = sm.loc[sm["stat"] == "throughput_ops_per_s", "value"].tolist()
    assert len(tp) == 2
    for p, want in zip(ph.values(), tp):
        assert p["ops_avg"] == pytest.approx(want, rel=0.05), p["name"]
        assert p["ops_p95"] is not None and p["ops_p95"] > 0
    assert ph["load"]["rates"].keys() == {"INSERT"}
    assert ph["workloada"]["rates"].keys() == {"READ", "UPDATE"}
    assert ph["load"]["ips_avg"] > 0 and ph["load"]["qps_avg"] is None
    assert ph["workloada"]["qps_avg"] > 0 and ph["workloada"]["ips_avg"] is None
    assert j["lost"]["probe"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                                  "malformed": 0, "dropped": 0}


def test_server_counts_equal_ycsbs_operations(run, phases_json):
    rec = mongoprobe.load_run(run)
    j = phases_json
    ph = {p["name"]: p for p in j["phases"]}
    tot = rec.tool_output.totals.set_index(["phase", "op"])["operations"]
    assert tot[("load", "INSERT")] == RECORDS
    assert tot[("workloada", "READ")] + tot[("workloada", "UPDATE")] == OPERATIONS
    for phase, op, cmd in (("load", "INSERT", "insert"), ("workloada", "READ", "find"),
                           ("workloada", "UPDATE", "update")):
        assert ph[phase]["latency_us"][cmd]["count"] == tot[(phase, op)], (phase, op)
        assert ph[phase]["client_latency_us"][op]["count"] == tot[(phase, op)]
        # the server counted every request YCSB made, and no more, over the whole run
        assert rec.metrics_delta[cmd] == ph[phase]["latency_us"][cmd]["count"]


def test_client_latency_beside_the_servers(run, phases_json):
    j = phases_json
    for p in j["phases"]:
        vs = p["client_vs_server"]
        assert set(vs) == set(p["rates"]), p["name"]
        for op, d in vs.items():
            assert d["command"] == {"INSERT": "insert", "READ": "find", "UPDATE": "update"}[op]
            assert p["client_how"][op] == "summary"
            # the server's time is inside the client's: its mean and max are not larger
            assert d["server"]["avg"] <= d["client"]["avg"], (p["name"], op)
            assert d["server"]["max"] <= d["client"]["max"], (p["name"], op)
            assert d["diff"]["count"] == 0
    text = mp("phases", str(run)).stdout
    assert "client (the tool's own) vs server (the probe) latency, us" in text
    assert "phases from the load tool's output: ycsb 0.17.0" in text
    assert max(len(s) for s in text.splitlines()) < 80


def test_parse_reads_the_runs_load_out(run):
    r = mp("parse", "ycsb", str(run / "load.out"), "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    assert {x["op"] for x in rows} >= {"INSERT", "READ", "UPDATE"}
    r = mp("parse", "auto", str(run / "load.out"), "--csv")
    assert r.returncode == 0 and r.stdout.startswith("time,elapsed_s,operations")


def test_report_plots_ycsbs_own_rates(run, tmp_path):
    out = tmp_path / "report.html"
    r = mp("report", str(run), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert 'alt="throughput over time"' in text
    assert "Client (the tool&#x27;s own) vs server (the probe) latency" in text or \
        "Client (the tool's own) vs server (the probe) latency" in text
    assert "workloada" in text and "READ" in text


def _limiter(p: dict) -> str:
    assert p["limiter"]["decided"], p["evidence_missing"]
    return p["limiter"]["resource"]


def test_verdicts_agree_with_ycsbs_own_latency(run, phases_json):
    """Nothing injected: a phase is limited in the server only if YCSB's requests spent
    most of the latency YCSB itself measured inside it. (Not alone on the machine, as
    test_verdicts.py's are: the check compares the run's own figures, which others'
    load moves together.)"""
    j = phases_json
    ph = {p["name"]: p for p in j["phases"]}
    assert set(ph) == {"load", "workloada"}
    for p in ph.values():
        t = p["time_split"]
        client, server = t["client_us"], t["server_us"]
        assert client and server, p["name"]
        inside = server / client    # of YCSB's own mean latency, the server's part
        r = _limiter(p)
        if r.startswith("server-"):
            assert inside >= 0.5, (p["name"], r, inside)
        else:
            load_tool = next(x["share"] for x in p["limits"] if x["resource"] == "load-tool")
            assert r in ("load-tool", "network", "none"), r
            assert inside < 0.75 or load_tool > 0.5, (p["name"], r, inside)


@pytest.fixture(scope="module")
def run_b(run, tmp_path_factory):
    """The same load, then workloadb (95% reads) instead of workloada (50%): the latency
    probe alone, for compare."""
    path = tmp_path_factory.mktemp("ycsb-b") / "RUN"
    script = f"set -e\n{ycsb('-load')}\n{ycsb('-t', 'workloadb')}\n"
    r = mp("record", "--target", "embedded", "-o", str(path), "--probes", "latency",
           "--", "sh", "-c", script, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return path


def test_compare_matches_workloada_with_workloadb(run, run_b):
    """YCSB's phases are load and workloada in one run, load and workloadb in the
    other: load by its name, the workloads by their order; their READ and UPDATE rows
    side by side, and workloadb's larger share of reads."""
    r = mp("compare", f"a={run}", f"b={run_b}", "--json")
    assert r.returncode == 0, r.stderr
    c = json.loads(r.stdout)
    assert [(p["name"], p["own_names"][str(run_b)]) for p in c["phases"]] == [
        ("load", "load"), ("workloada", "workloadb")]
    assert any("matched by their order" in w and "workloadb" in w for w in c["warnings"])
    assert c["unmatched"] == []
    wl = c["phases"][1]["metrics"]
    for op in ("READ", "UPDATE"):
        assert wl[f"client_latency_us.{op}.avg"]["values"]["b"] is not None, op
    for cmd in ("find", "update"):
        assert wl[f"latency_us.{cmd}.p50"]["values"]["b"] is not None, cmd
    reads, updates = (c["phases"][1]["histograms"]["by_command"][k] for k in ("find", "update"))
    # workloadb: 95% reads, 5% updates; workloada: 50/50
    assert sum(reads[str(run_b)]) > 5 * sum(updates[str(run_b)])
    assert sum(reads[str(run)]) < 2 * sum(updates[str(run)])
