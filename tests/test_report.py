"""Per-phase table and HTML report of a real recorded run (samples/load/run-ferretdb)."""

from __future__ import annotations

import base64
import io
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from helpers.cli import mp
from helpers.run_copies import drop_events

RUN = Path(__file__).resolve().parents[1] / "samples" / "load" / "run-ferretdb"


def test_phases_json_contract_and_zero_phases():
    r = mp("phases", str(RUN), "--json")
    assert r.returncode == 0, r.stderr
    ph = {p["name"]: p for p in json.loads(r.stdout)["phases"]}
    assert list(ph) == ["2i.1q", "1i@50.2q", "0i.2q"]
    for p in ph.values():
        assert {"name", "start", "end", "ips_avg", "ips_p95", "qps_avg", "qps_p95",
                "latency_us", "r_per_op", "rkb_per_op", "wkb_per_op", "cs_per_op",
                "cpu_us_per_op"} <= set(p)
        assert p["start"] < p["end"]
    assert ph["0i.2q"]["ips_avg"] == 0 and "insert" not in ph["0i.2q"]["latency_us"]
    assert ph["2i.1q"]["ips_avg"] > 0 and ph["2i.1q"]["qps_avg"] > 0
    ins = ph["2i.1q"]["latency_us"]["insert"]
    assert 0 < ins["p50"] <= ins["p95"] <= ins["p99"] <= ins["max"]


def test_phases_text_is_under_80_columns():
    r = mp("phases", str(RUN))
    assert r.returncode == 0, r.stderr
    assert max(len(line) for line in r.stdout.splitlines()) < 80
    assert "2i.1q" in r.stdout and "server latency (the probe), us" in r.stdout


def test_report_renders_in_headless_chromium(tmp_path):
    from matplotlib import image

    out = tmp_path / "report.html"
    r = mp("report", str(RUN), "-o", str(out))
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    # self-contained: every image is embedded and decodes as a PNG
    srcs = re.findall(r'<img alt="[^"]*" src="([^"]+)"', text)
    assert len(srcs) >= 5
    for src in srcs:
        assert src.startswith("data:image/png;base64,")
        img = image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert img.shape[0] > 100 and img.shape[1] > 100
    chromium = shutil.which("chromium")
    if not chromium:
        pytest.skip("chromium is not installed (scripts/setup.sh installs it)")
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                    "--no-first-run", "--disable-background-networking",
                    "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1200,2400",
                    f"--screenshot={shot}", out.as_uri()], capture_output=True, timeout=120)
    png = image.imread(str(shot))
    assert png.shape[:2] == (2400, 1200)
    # not a blank page: the plots put many distinct colours on it
    assert len({tuple(px) for px in png[::8, ::8].reshape(-1, png.shape[2])}) > 50


def test_report_of_a_run_without_events(tmp_path):
    """A run recorded without --events: the server's figures come from the per-second
    histograms (whole seconds inside each phase); the tables say so, the report renders,
    and the client-vs-server counts are not differenced."""
    run = tmp_path / "run"
    shutil.copytree(RUN, run)
    drop_events(run)
    j = json.loads(mp("phases", str(run), "--json").stdout)
    for p in j["phases"]:
        assert p["server_exact"] is False and 0 < p["server_s"] <= p["seconds"] + 1
        for d in p["client_vs_server"].values():
            assert "count" not in d["diff"] and "p95" in d["diff"]
    text = mp("phases", str(run)).stdout
    assert "(per-second histograms: each phase's whole seconds," in text
    r = mp("report", str(run), "-o", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert "Client (the tool's own) vs server (the probe) latency" in (tmp_path / "r.html").read_text()
