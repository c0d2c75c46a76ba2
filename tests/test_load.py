"""mongoprobe load: the phase spec, its output format and parser, and a real run.

The real run drives the session's FerretDB through three phases (inserts with
queries, a rate-limited insert thread with queries, queries alone) and checks the
printed intervals, markers and summary against each other and against FerretDB's
own request counts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import mp
from helpers.ferretdb import metrics_delta
from mongoprobe.load import insert_workload as load
from mongoprobe.run import target
from mongoprobe.formats import mongoprobe_load
from mongoprobe.formats.errors import FormatError

SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "load" / "run-ferretdb"
SPEC = "2i.1q:3s,1i@50.2q:3s,0i.2q:3s"
START = re.compile(r"^### phase start name=(\S+) time=(\d+\.\d+)$")
END = re.compile(r"^### phase end name=(\S+) time=(\d+\.\d+)$")


# --- the spec ------------------------------------------------------------------------


def test_spec_parses_threads_rates_and_lengths():
    ps = load.parse_spec("10i.1q:60s,1i@1000.10q:5m,0i.10q:1h,10i.0q:100000i,1i@1000.10q:90")
    assert [p.name for p in ps] == ["10i.1q", "1i@1000.10q", "0i.10q", "10i.0q",
                                    "1i@1000.10q-2"]
    assert (ps[0].insert_threads, ps[0].query_threads, ps[0].rate, ps[0].seconds) == \
        (10, 1, None, 60)
    assert (ps[1].rate, ps[1].seconds) == (1000.0, 300)
    assert ps[2].seconds == 3600
    assert (ps[3].seconds, ps[3].docs) == (None, 100000)
    assert ps[4].seconds == 90


@pytest.mark.parametrize("bad, why", [
    ("10i1q:60s", "expected Ni"), ("0i.0q:5s", "no insert and no query"),
    ("0i.2q:100i", "no insert thread"), ("1i@0.1q:5s", "positive"),
    ("1i.1q", "expected Ni"), ("1i.1q:0s", "positive")])
def test_spec_errors_say_which_phase_and_why(bad, why):
    with pytest.raises(load.SpecError, match=why):
        load.parse_spec(f"1i.1q:1s,{bad}")


def test_buckets_and_p95():
    assert [load.bucket_of(s) for s in (0.0001, 0.0005, 0.002, 0.01, 0.05, 0.1, 0.5, 2, 10, 20)] \
        == list(range(10))
    assert load.bucket_of(0.001) == 2          # "less than 1ms" excludes 1 ms itself
    assert load._p95([]) is None        # no full interval: no p95 in the summary
    assert load._p95([float(r) for r in range(1, 101)]) == 5.0
    assert load.redact("mongodb://u:secret@h:1/") == "mongodb://u:***@h:1/"


# --- the parser on the committed real output -------------------------------------------


def _check_consistent(out: mongoprobe_load.LoadOutput) -> None:
    s = out.summary
    assert list(out.phases["name"]) == [p["name"] for p in s["phases"]]
    for p in s["phases"]:
        iv = out.intervals[out.intervals["phase"] == p["name"]]
        # Interval counts add up to the phase totals; the last cumulative is the total.
        assert iv["inserts"].iloc[-1] == p["inserts"]
        assert iv["queries"].iloc[-1] == p["queries"]
        assert round((iv["ips"] * iv["length_s"]).sum()) == pytest.approx(p["inserts"], abs=2)
        hist = iv[[f"insert_{b}" for b in mongoprobe_load.BUCKETS]].sum()
        assert list(hist) == [p["insert_hist"][b] for b in mongoprobe_load.BUCKETS]
        assert sum(p["query_hist"].values()) == p["queries"]
        assert p["commands"].get("insert", 0) == p["insert_ops"] == p["inserts"]   # batch 1
        assert p["commands"].get("find", 0) == p["queries"]
        ph = out.phases.set_index("name").loc[p["name"]]
        assert ph["start"] < ph["end"]
        assert ph["inserts"] == p["inserts"]


def test_parser_on_the_recorded_sample():
    raw = (SAMPLE / "load.stdout").read_text()
    assert mongoprobe_load.is_mongoprobe_load(raw)
    out = mongoprobe_load.parse_mongoprobe_load(raw.splitlines(), "load.stdout")
    assert list(out.phases["name"]) == ["2i.1q", "1i@50.2q", "0i.2q"]
    assert out.header["pad"] == "256" and out.header["query_limit"] == "4"
    assert list(out.markers["event"]) == ["start", "end"] * 3
    assert out.markers["received"].isna().all()
    _check_consistent(out)
    assert set(out.commands["phase"]) >= {"setup", "teardown", "2i.1q"}
    assert list(mongoprobe_load.parse(raw.splitlines()).columns) == \
        mongoprobe_load.INTERVAL_COLUMNS

    # The stamped copy record kept parses to the same tables, plus receive times.
    stamped = (SAMPLE / "load.out").read_text()
    assert mongoprobe_load.is_mongoprobe_load(stamped)
    out2 = mongoprobe_load.parse_mongoprobe_load(stamped.splitlines(), "load.out")
    assert out2.intervals.equals(out.intervals)
    assert out2.phases.equals(out.phases)
    assert (out2.markers["received"] >= out2.markers["time"]).all()
    assert (out2.markers["received"] - out2.markers["time"] < 1.0).all()


def test_parser_without_summary_derives_the_phases():
    lines = (SAMPLE / "load.stdout").read_text().splitlines()
    cut = [ln for ln in lines if not ln.startswith("### summary")]
    full = mongoprobe_load.parse_mongoprobe_load(lines).phases
    part = mongoprobe_load.parse_mongoprobe_load(cut).phases
    assert list(part["inserts"]) == list(full["inserts"])
    assert list(part["queries"]) == list(full["queries"])
    assert list(part["insert_threads"]) == [2, 1, 0] and list(part["rate"].fillna(0)) == \
        [0, 50, 0]
    # A phase that never ended (output cut short) has no end.
    cut = [ln for ln in cut if not ln.startswith("### phase end name=0i.2q")]
    last = mongoprobe_load.parse_mongoprobe_load(cut).phases.iloc[-1]
    assert last["end"] != last["end"] and bool(last["interrupted"])


def test_parser_error_names_file_and_line():
    lines = (SAMPLE / "load.stdout").read_text().splitlines()
    lines.insert(5, "1795343942.227 2i.1q 1.000 oops")
    with pytest.raises(FormatError, match=r"^x.txt:6: expected an interval line"):
        mongoprobe_load.parse_mongoprobe_load(lines, "x.txt")
    assert not mongoprobe_load.is_mongoprobe_load("Loading workload...\n")


# --- real runs --------------------------------------------------------------------------


def test_load_needs_a_uri():
    env = {k: v for k, v in os.environ.items() if k != "MONGOPROBE_URI"}
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "load", "--phases", "1i.0q:1s"],
                       capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2
    assert r.stderr.strip() == "mongoprobe: no --uri and MONGOPROBE_URI is not set"
    r = mp("load", "--uri", "mongodb://127.0.0.1:1/", "--phases", "1i.0q")
    assert r.returncode == 2 and "--phases: phase '1i.0q'" in r.stderr


@pytest.mark.serial     # the paced phase's rate: alone on the machine
def test_load_on_ferretdb(ferretdb):
    before = target.request_counts(ferretdb.metrics_url)
    t0 = time.time()
    # The URI comes from the environment, as under mongoprobe record.
    r = mp("load", "--phases", SPEC, "--db", "test_load", env={"MONGOPROBE_URI": ferretdb.uri})
    t1 = time.time()
    after = target.request_counts(ferretdb.metrics_url)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    lines = r.stdout.splitlines()

    # Markers in exactly the documented format, in order, inside the run's time.
    marks = [(m[1], float(m[2])) for m in map(START.match, lines) if m]
    ends = [(m[1], float(m[2])) for m in map(END.match, lines) if m]
    names = ["2i.1q", "1i@50.2q", "0i.2q"]
    assert [n for n, _ in marks] == names and [n for n, _ in ends] == names
    for (_, s), (_, e) in zip(marks, ends):
        assert t0 < s < e < t1
        assert 2.9 < e - s < 6
    assert lines[-1].startswith("### summary {")

    out = mongoprobe_load.parse_mongoprobe_load(lines, "stdout")
    _check_consistent(out)
    s = out.summary
    assert s["error"] is None and s["interrupted"] is False
    assert (s["pad"], s["query_limit"]) == (256, 4)
    ph = out.phases.set_index("name")

    # About one interval line per second per phase, each inside its phase.
    for name, (start, end) in zip(names, [(s_, e_) for (_, s_), (_, e_) in zip(marks, ends)]):
        iv = out.intervals[out.intervals["phase"] == name]
        assert 3 <= len(iv) <= 4
        assert ((iv["time"] >= start) & (iv["time"] <= end + 0.01)).all()
        assert (iv["length_s"] > 0).all()

    # The rate limit holds (+-20%); the 0i phase inserts nothing but queries.
    rl = ph.loc["1i@50.2q"]
    assert 0.8 * 50 <= rl["inserts"] / rl["seconds"] <= 1.2 * 50, rl
    assert rl["rate"] == 50.0
    assert ph.loc["0i.2q", "inserts"] == 0 and ph.loc["0i.2q", "queries"] > 0
    assert (out.intervals[out.intervals["phase"] == "0i.2q"][
        [f"insert_{b}" for b in mongoprobe_load.BUCKETS]].to_numpy() == 0).all()
    assert ph.loc["2i.1q", "inserts"] > 0 and ph.loc["2i.1q", "queries"] > 0

    # Documents are really there, with the pad and the three secondary indexes.
    import pymongo
    with pymongo.MongoClient(ferretdb.uri) as c:
        coll = c.test_load.purchases_index
        assert coll.count_documents({}) == int(ph["inserts"].sum())
        doc = coll.find_one({"_id": 0})
        assert len(doc["data"]) == 256
        assert {"cashregisterid", "customerid", "productid", "price", "dateandtime"} <= set(doc)
        assert len(coll.index_information()) == 4

    # What command monitoring saw is what FerretDB counted, command by command.
    delta = metrics_delta(before, after)
    total = s["commands"]["total"]
    for cmd in ("insert", "find", "drop", "createIndexes"):
        assert delta[cmd] == total[cmd], cmd
    assert total["insert"] == int(ph["inserts"].sum())
    assert total["find"] == int(ph["queries"].sum())


def test_load_interrupted_ends_the_phase_and_summarises(ferretdb):
    proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", "load", "--uri", ferretdb.uri,
                             "--db", "test_load_int", "--phases", "1i.1q:60s,1i.0q:60s"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
        if len(lines) > 5 and lines[-1][:1].isdigit():     # an interval line printed
            break
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=30)
    lines += rest.splitlines()
    assert proc.returncode == 130, err
    out = mongoprobe_load.parse_mongoprobe_load(lines)
    assert list(out.phases["name"]) == ["1i.1q"]          # the second phase never ran
    assert out.summary["interrupted"] is True
    assert bool(out.phases["interrupted"].iloc[0])
    assert out.phases["seconds"].iloc[0] < 30
    _check_consistent(out)


def test_nothing_is_imported_between_two_phases(ferretdb):
    """From one phase's end to the next one's start the tool only asks dbStats and
    prints: a module imported there (pandas, for the summary's p95, once took 0.3 s
    quiet and seconds on a busy machine) delays the next phase, an idle gap in the
    server's traffic that split a phase found from it (traffic_phases) in two. Python's
    -X importtime says each import on stderr as it happens, into stdout's pipe here."""
    r = subprocess.run([sys.executable, "-X", "importtime", "-u", "-m", "mongoprobe",
                        "load", "--uri", ferretdb.uri, "--db", "test_load_imports",
                        "--phases", "1i.1q:1s,1i.0q:1s,0i.1q:1s"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout[-2000:]
    lines = r.stdout.splitlines()
    ends = [i for i, s in enumerate(lines) if END.match(s)]
    starts = [i for i, s in enumerate(lines) if START.match(s)]
    assert len(starts) == len(ends) == 3
    between = [s for e, s in zip(ends, starts[1:]) for s in lines[e:s]
               if s.startswith("import time:")]
    assert not between, between
