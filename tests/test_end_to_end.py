"""Issue 4's end-to-end check: a short 4-phase built-in load recorded on the real target
with the latency probe, a profile, vmstat/iostat and a packet capture (conftest's
``recorded_run``, shared with test_record and test_traffic), read back with `mongoprobe
phases` and `mongoprobe report`."""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

from helpers.cli import mp
from helpers.recorded import NAMES



@pytest.fixture(scope="module")
def run(recorded_run):
    return recorded_run.path


def test_phase_table_zero_inserts_and_zero_queries(run):
    r = mp("phases", str(run), "--json")
    assert r.returncode == 0, r.stderr
    ph = {p["name"]: p for p in json.loads(r.stdout)["phases"]}
    assert list(ph) == NAMES
    assert ph["0i.2q"]["ips_avg"] == 0 and ph["0i.2q"]["qps_avg"] > 0
    assert ph["2i.0q"]["qps_avg"] == 0 and ph["2i.0q"]["ips_avg"] > 0
    assert "insert" not in ph["0i.2q"]["latency_us"]
    assert "find" not in ph["2i.0q"]["latency_us"]
    # the load's own client-side latency: only for the operations a phase ran
    assert set(ph["2i.1q"]["client_ms"]) == {"insert", "query"}
    assert set(ph["1i@50.2q"]["client_ms"]) == {"insert", "query"}
    assert set(ph["0i.2q"]["client_ms"]) == {"query"}
    assert set(ph["2i.0q"]["client_ms"]) == {"insert"}
    # the database grows with the inserts, and its size is known at each phase end
    assert 0 < ph["2i.1q"]["db_mb"] <= ph["1i@50.2q"]["db_mb"] <= ph["0i.2q"]["db_mb"] \
        < ph["2i.0q"]["db_mb"]
    for p in ph.values():
        assert p["rss_mb"] is None or p["rss_mb"] > 0
        assert p["cs_per_op"] is not None and p["cs_per_op"] > 0
        assert p["cpu_us_per_op"] is not None and p["cpu_us_per_op"] > 0


def test_probe_counts_equal_the_load_and_ferretdb(run):
    import mongoprobe

    r = mongoprobe.load_run(run)
    probe = r.events["command"].value_counts().to_dict()
    assert probe == r.latency_counts == r.metrics_delta
    load_total = r.load_summary["commands"]["total"]
    for cmd in ("insert", "find"):
        assert probe[cmd] == load_total[cmd], cmd
    # ... and phase by phase, for what the load sent in each phase
    for p in r.load_summary["phases"]:
        ev = r.events[(r.events["time"] >= p["start"]) & (r.events["time"] < p["end"])]
        got = ev["command"].value_counts().to_dict()
        for cmd, n in p["commands"].items():
            assert got.get(cmd, 0) == n, (p["name"], cmd)


def test_histogram_percentiles_within_the_bound_of_the_exact_ones(run):
    """Per phase, what the per-second histograms alone give (a run recorded without
    --events) against the exact nearest-rank figures of every request's event over the
    same whole seconds: counts equal, percentiles within the buckets' 1.6%."""
    import mongoprobe
    from mongoprobe.model import loglinear_buckets as loglinear
    from mongoprobe.model.latencies import Latencies, nearest_rank

    r = mongoprobe.load_run(run)
    full = r.latencies
    hist = Latencies(full.hist, full.totals)            # as if recorded without events
    ev = r.events
    checked = 0
    for p in r.phases.itertuples():
        lo, hi = hist._grid(p.start, p.end)
        got = hist.stats(p.start, p.end)
        part = ev[(ev["time"] >= lo) & (ev["time"] < hi)]
        for cmd, g in part.groupby("command"):
            v = np.sort(g["latency_ns"].to_numpy())
            assert got[cmd]["count"] == len(v), (p.name, cmd)
            assert got[cmd]["max"] == v[-1]
            for q in (50, 95, 99):
                exact = nearest_rank(v, q)
                assert abs(got[cmd][f"p{q}"] - exact) <= loglinear.MAX_ERROR * exact + 1, \
                    (p.name, cmd, q)
                checked += 1
    assert checked >= 4 * 3        # insert and find, in the phases that send them


def test_profile_losses_travel_with_the_run(run):
    """The profile's own sample counter beside what was folded, and the stacks bpftrace
    could not print (its stderr), in phases --json and the text table."""
    j = json.loads(mp("phases", str(run), "--json").stdout)
    st = j["lost"]["stacks"]["profile"]
    err = (run / "profile.err").read_text()
    assert st["lookup_failed"] == err.count("failed to look up stack id")
    assert st["samples"] is not None and st["folded"] > 0
    # every sample counted is folded or printed with empty stacks (a failed lookup
    # prints empty); the map had room for all, so at most the samples taken while
    # bpftrace printed its maps at exit are missing
    assert 0 <= st["samples"] - st["folded"] - st["empty"] <= 0.01 * st["samples"], st
    text = mp("phases", str(run)).stdout
    assert f"lost: profile stacks folded {st['folded']} of {st['samples']} counted" in text


def test_report_renders_with_profile(run, tmp_path):
    out = tmp_path / "report.html"
    r = mp("report", str(run), "-o", str(out), "--diff", "2i.1q", "2i.0q")
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert len(re.findall(r'<img alt="[^"]*" src="data:image/png;base64,', text)) >= 5
    # per-phase flame graphs and the diff, with FerretDB's own frames in them
    frames = re.findall(r'<h3>([^<]+)</h3><iframe title="[^"]*" class="flame" style="width:100%;'
                        r'height:(\d+)px;border:0" src="data:image/svg\+xml;base64,([^"]+)"', text)
    titles = [t for t, _h, _d in frames]
    assert len([t for t in titles if re.match(r"RUN - phase \S+ - pid \d+$", t)]) == len(NAMES), \
        titles
    assert titles[-1] == "Differential: RUN - phase 2i.1q -&gt; 2i.0q - pid " + titles[0].split()[-1]
    for _t, height, data in frames:    # each a whole SVG document, its frame as tall as it
        svg = base64.b64decode(data).decode()
        assert svg.lstrip().startswith("<?xml") and "github.com/FerretDB/FerretDB" in svg
        assert f'height="{int(height) - 8}"' in svg
    assert "On-CPU samples by category" in text


def test_flamegraph_and_heatmap_take_the_run_directory(run, tmp_path):
    from matplotlib import image

    svg = tmp_path / "p.svg"
    r = mp("flamegraph", str(run), "--phase", "2i.0q", "-o", str(svg))
    assert r.returncode == 0, r.stderr
    text = svg.read_text()
    assert "RUN - phase 2i.0q" in text and "github.com/FerretDB/FerretDB" in text
    r = mp("flamegraph", str(run), "--diff", "2i.1q", "2i.0q", "-o", str(tmp_path / "d.svg"))
    assert r.returncode == 0, r.stderr
    for what in ("latency", "cpu"):
        png = tmp_path / f"{what}.png"
        r = mp("heatmap", str(run), "--what", what, "-o", str(png))
        assert r.returncode == 0, r.stderr
        assert image.imread(str(png)).shape[:2] == (480, 1200)


def test_network_vs_server_latency_per_phase(run):
    r = mp("phases", str(run), "--json")
    for p in json.loads(r.stdout)["phases"]:
        n = p["network_us"]
        assert n["matched"] > 0, p["name"]
        # the wire and the kernel add time: the network side is never the faster
        assert n["network_p50"] >= n["server_p50"] and n["network_p99"] >= n["server_p99"]
        # transport = network - server per request (pcap.join_with_probe): the server's
        # time is part of the network side's, so each request's transport is shorter
        assert n["transport_p50"] < n["network_p50"] and n["transport_p99"] < n["network_p99"]
