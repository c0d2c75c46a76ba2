"""mongoprobe compare, offline: copies of one real run (samples/load/run-compare: the
built-in load, 2i.1q for 24 s then 0i.2q for 16 s, on the embedded FerretDB), changed
in known ways; the differential flame graphs of a real series with on-CPU profiles
(samples/load/run-pads: 256-byte against 4-KB documents); and the test of significance
against scipy's figures."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from helpers.cli import mp
from helpers.run_copies import edit_manifest
from mongoprobe.analysis import significance
from mongoprobe.views import comparison

RUN = Path(__file__).resolve().parents[1] / "samples" / "load" / "run-compare"
PADS = RUN.parent / "run-pads"


def _copy(tmp_path: Path, name: str, lines=None, labels: dict | None = None) -> Path:
    """A copy of the sample; ``lines`` rewrites each load.out line's text; ``labels``
    go in its manifest."""
    run = tmp_path / name
    shutil.copytree(RUN, run)
    if lines is not None:
        out = []
        for line in (run / "load.out").read_text().splitlines():
            t, stream, text = line.split("\t", 2)
            out.append(f"{t}\t{stream}\t{lines(text)}")
        (run / "load.out").write_text("\n".join(out) + "\n")
    return run if labels is None else edit_manifest(run, labels=labels)


def _scaled(text: str, f: float = 0.8) -> str:
    """An interval line of the built-in load with every count scaled by ``f``: ips,
    qps and the cumulative inserts and queries."""
    parts = text.split()
    if len(parts) != 11 or text.startswith("#"):
        return text
    parts[3], parts[4] = f"{float(parts[3]) * f:.1f}", f"{float(parts[4]) * f:.1f}"
    parts[5], parts[6] = str(round(int(parts[5]) * f)), str(round(int(parts[6]) * f))
    return " ".join(parts)


def _compare(*args: str) -> dict:
    r = mp("compare", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> dict:
    """The sample, an unchanged copy and a copy with every count scaled by 0.8, each
    pair compared once (a compare figures every block of each run: seconds of CPU)."""
    tmp = tmp_path_factory.mktemp("pairs")
    a, b, scaled = _copy(tmp, "a"), _copy(tmp, "b"), _copy(tmp, "scaled", _scaled)
    return {"a": a, "b": b, "scaled": scaled, "same": _compare(str(a), str(b)),
            "less": _compare(str(a), str(scaled), "--min-change", "30")}


def test_a_run_against_its_copy_is_the_same_everywhere(pairs):
    a, b, c = pairs["a"], pairs["b"], pairs["same"]
    assert c["baseline"] == "a" and c["groups"] == {"a": [str(a)], "b": [str(b)]}
    assert c["samples"] == "blocks" and c["unmatched"] == []
    assert any(w.startswith("within-run noise only") for w in c["warnings"])
    assert [p["name"] for p in c["phases"]] == ["2i.1q", "0i.2q"]
    for p in c["phases"]:
        assert p["limiter"]["a"] == p["limiter"]["b"] and p["limiter_changed"] == {"b": False}
        assert {"ops_avg", "ips_avg", "qps_avg", "wkb_per_op", "cpu_us_per_op",
                "latency_us.find.p99"} <= set(p["metrics"])
        for metric, cell in p["metrics"].items():
            assert cell["values"]["a"] == cell["values"]["b"], metric
            assert cell["significant"] == {"b": False}, metric
            assert cell["delta_pct"]["b"] in (0.0, None), metric
    text = comparison.render(c)
    assert max(len(line) for line in text.splitlines()) < 80
    assert "*" not in "".join(line[18:] for line in text.splitlines()
                              if line.startswith(("ops/s", "inserts/s", "find p")))


def test_a_copy_with_every_count_scaled_by_0_8_is_20_percent_less(pairs):
    c = pairs["less"]
    ph = {p["name"]: p for p in c["phases"]}
    for metric in ("ops_avg", "ips_avg", "qps_avg"):
        assert ph["2i.1q"]["metrics"][metric]["delta_pct"]["scaled"] == pytest.approx(-20,
                                                                                      abs=1)
    # 0i.2q: some 30 queries, so the rounding of a scaled count is up to half of one
    # query, 1.7%, past the 1%
    cell = ph["0i.2q"]["metrics"]["qps_avg"]
    queries = cell["values"]["a"] * 16
    assert cell["delta_pct"]["scaled"] == pytest.approx(-20, abs=1 + 50 / queries)
    # every second of the insert phase lost a fifth of its inserts: told from noise
    for metric in ("ops_avg", "ips_avg"):
        assert ph["2i.1q"]["metrics"][metric]["significant"]["scaled"] is True, metric
        assert ph["2i.1q"]["metrics"][metric]["p"]["scaled"] < 0.05
    # the server's own figures did not change
    for metric, cell in ph["2i.1q"]["metrics"].items():
        if metric.startswith("latency_us."):
            assert cell["significant"]["scaled"] is False
            assert cell["delta_pct"]["scaled"] == 0.0
    # the change is smaller than --min-change 30: significant, and marked small
    cell = ph["2i.1q"]["metrics"]["ips_avg"]
    assert cell["significant"]["scaled"] is True and cell["small"] == {"scaled": True}
    row = next(line for line in comparison.render(c).splitlines()
               if line.startswith("inserts/s"))
    assert row.rstrip().endswith("s") and ("-20." in row or "-19." in row), row


def test_groups_of_runs_are_the_samples_with_benchstats_warning(tmp_path):
    a = [_copy(tmp_path, f"a{i}") for i in range(2)]
    b = [_copy(tmp_path, f"b{i}", _scaled) for i in range(2)]
    c = _compare(f"A={a[0]},{a[1]}", f"B={b[0]},{b[1]}")
    assert c["samples"] == "runs" and c["groups"] == {"A": [str(p) for p in a],
                                                      "B": [str(p) for p in b]}
    assert any("fewer than 4 runs" in w for w in c["warnings"])
    # and Holm's correction over the table leaves no cell able to pass: said
    assert any(w.startswith("no difference can be significant after Holm's correction")
               for w in c["warnings"]), c["warnings"]
    ips = {p["name"]: p for p in c["phases"]}["2i.1q"]["metrics"]["ips_avg"]
    # 2 runs against 2: the smallest p is 1/3, so nothing can be significant
    assert ips["delta_pct"]["B"] == pytest.approx(-20, abs=1)
    assert ips["significant"]["B"] is False and ips["p"]["B"] >= 1 / 3


def test_phases_are_matched_by_name_else_by_order(tmp_path):
    a = _copy(tmp_path, "a")
    renamed = _copy(tmp_path, "b", lambda t: t.replace("0i.2q", "queries"))
    c = _compare(str(a), str(renamed))
    assert [p["name"] for p in c["phases"]] == ["2i.1q", "0i.2q"]
    assert [p["own_names"][str(renamed)] for p in c["phases"]] == ["2i.1q", "queries"]
    assert any("phases without a name in common: matched by their order" in w
               for w in c["warnings"])
    other = _copy(tmp_path, "c", lambda t: t.replace("0i.2q", "queries")
                  .replace("2i.1q", "inserts"))
    c = _compare(str(a), str(other))
    assert [p["own_names"][str(other)] for p in c["phases"]] == ["inserts", "queries"]
    assert any("share no phase name" in w for w in c["warnings"])
    assert c["unmatched"] == []
    # a run that lacks a phase: the other's is listed, not dropped silently
    short = tmp_path / "d"
    shutil.copytree(a, short)
    lines = (short / "load.out").read_text().splitlines()
    (short / "load.out").write_text("\n".join(
        x for x in lines if "0i.2q" not in x) + "\n")
    c = _compare(str(a), str(short))
    assert [p["name"] for p in c["phases"]] == ["2i.1q"]
    assert c["unmatched"] == [{"group": "a", "run": str(a), "phase": "0i.2q"}]


def test_col_lays_a_sweep_out_in_numeric_order(tmp_path):
    runs = [_copy(tmp_path, f"r{t}", labels={"threads": str(t)}) for t in (8, 2, 16)]
    c = _compare(*map(str, runs), "--col", "threads")
    assert list(c["groups"]) == ["threads=2", "threads=8", "threads=16"]
    assert c["baseline"] == "threads=2"
    assert c["labels"]["threads=16"] == {"threads": "16"}
    r = mp("compare", *map(str, runs), "--col", "nosuch")
    assert r.returncode == 1 and "no label 'nosuch'" in r.stderr


def test_csv_and_the_html_report(pairs, tmp_path):
    out = tmp_path / "cmp.html"
    r = mp("compare", str(pairs["a"]), str(pairs["scaled"]), "--csv", "--report", str(out))
    assert r.returncode == 0, r.stderr
    rows = r.stdout.splitlines()
    assert rows[0] == "phase,metric,group,value,delta_pct,p,significant,small,baseline"
    ips = [x for x in rows if x.startswith("2i.1q,ips_avg,scaled,")]
    assert len(ips) == 1 and ips[0].split(",")[6] == "true"
    text = out.read_text()
    assert text.index("<h2>Differences</h2>") < text.index("<h2>Phases</h2>")
    assert "inserts/s" in text and "256us" in text


def _max_delta(svg: str) -> float:
    """The largest change of a frame's own samples an inferno differential graph shows
    (its titles: "NAME (N samples, P%; +D%)")."""
    import re
    return max(float(d) for d in re.findall(r"samples, [\d.]+%; ([+-]?[\d.]+)%\)", svg))


def test_flame_graphs_compare_cpu_per_operation(tmp_path):
    from mongoprobe.analysis import compare_profiles, run_compare
    from mongoprobe.model import stack_samples
    from mongoprobe.run.run_folder import load_run

    r = mp("compare", str(PADS), "--flamegraphs", str(tmp_path / "fg"), "--report",
           str(tmp_path / "cmp.html"))
    assert r.returncode == 0, r.stderr
    assert "2 differential flame graphs written" in r.stderr
    graph = (tmp_path / "fg" / "2i.1q.pad=4096-vs-pad=256.svg").read_text()
    reverse = (tmp_path / "fg" / "2i.1q.pad=4096-vs-pad=256.reversed.svg").read_text()
    # what inferno was given: the baseline's samples times the operations' ratio
    paths = [str(PADS / n) for n in ("pad=256.1", "pad=4096.1")]
    groups = [run_compare.Group(f"pad={n}", [load_run(p)], [p])
              for n, p in zip((256, 4096), paths)]
    c = run_compare.compare(groups)
    a, b = (compare_profiles.phase_stacks(groups, c)["2i.1q"][g] for g in ("pad=256",
                                                                         "pad=4096"))
    k = b.operations / a.operations
    assert a.operations == pytest.approx(c["phases"][0]["operations"][paths[0]])
    assert k != pytest.approx(b.samples / a.samples, rel=0.01)   # (else this tells nothing)
    for svg, (first, second, f) in ((graph, (a, b, k)), (reverse, (b, a, 1 / k))):
        rows = stack_samples.diff_folded(first.folded, second.folded, scale=f)
        want = max(after - before for _, before, after in rows) / second.samples * 100
        assert _max_delta(svg) == pytest.approx(want, abs=0.006)
        assert f"scaled x{f:.3g}" in svg
    assert "pad=4096 against pad=256, per operation" in graph
    prof = c["phases"][0]["profile"]
    assert prof["pad=4096"]["samples_per_op"] == pytest.approx(b.samples / b.operations)
    text = mp("compare", str(PADS)).stdout
    assert any(line.startswith("cpu samples per op") for line in text.splitlines())
    # the report holds both graphs, each in its frame
    html = (tmp_path / "cmp.html").read_text()
    assert html.count("<iframe") == 2 and "(reversed)" in html


def test_flame_graphs_scaled_to_samples_and_none():
    from mongoprobe.analysis import compare_profiles
    from mongoprobe.model import stack_samples

    a, b = {"x;y": 10, "x;z": 30}, {"x;y": 30, "x;z": 30}

    # per operation: A did 100 operations, B 200; A's samples are doubled
    sa, sb = compare_profiles.Side(a, 100, 1), compare_profiles.Side(b, 200, 1)
    assert compare_profiles.scale(sa, sb) == 2
    assert stack_samples.diff_folded(a, b, scale=2) == [("x;y", 20, 30), ("x;z", 60, 30)]
    assert compare_profiles.scale(sa, sb, "samples") == 1.5
    assert compare_profiles.scale(sa, sb, "none") is None
    assert stack_samples.diff_folded(a, b) == [("x;y", 10, 30), ("x;z", 30, 30)]
    with pytest.raises(ValueError, match="no operations"):
        compare_profiles.scale(compare_profiles.Side(a, 0, 1), sb)


def test_flame_graphs_of_runs_without_a_profile_is_one_line(pairs, tmp_path):
    r = mp("compare", str(pairs["a"]), str(pairs["b"]), "--flamegraphs", str(tmp_path))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "mongoprobe: no run has an on-CPU profile to draw: record with --probes ...,profile"]


def test_a_damaged_run_is_one_line(tmp_path):
    a, b = _copy(tmp_path, "a"), _copy(tmp_path, "b")
    (b / "latency.bcc.jsonl.zst").write_bytes(b"not zstd")
    r = mp("compare", str(a), str(b))
    assert r.returncode == 1 and r.stdout == ""
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("mongoprobe: ") and "latency.bcc.jsonl.zst" in line


@pytest.mark.parametrize(("a", "b", "want"), [
    # scipy.stats.mannwhitneyu(a, b).pvalue (exact without ties, else asymptotic)
    ([1.2, 3.4, 2.2, 5.0], [6.1, 7.3, 8.0, 9.9], 0.028571428571428571),
    ([1, 3, 5, 7], [2, 4, 6, 8], 0.6857142857142857),
    ([1, 1, 2, 2, 3, 3], [2, 3, 3, 4, 4, 5], 0.039393270229857606),
])
def test_mann_whitney_is_scipys(a, b, want):
    assert significance.mann_whitney(a, b) == pytest.approx(want, rel=1e-5)


def test_holm_and_the_smallest_p():
    assert significance.holm([0.01, 0.04, 0.03, 0.5]) == [0.04, 0.09, 0.09, 0.5]
    assert significance.min_p(4, 4) == pytest.approx(2 / 70)
    assert significance.min_p(3, 3) == pytest.approx(0.1)
    assert significance.mann_whitney([1, 1], [1, 1]) == 1.0
    assert math.isnan(significance.trend([1.0, 2.0]))
    assert significance.trend(list(range(10))) == pytest.approx(1.0)
