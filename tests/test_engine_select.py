"""``--engine auto`` (the default of latency, snoop and record), and what a tracer that
cannot run says.

- latency without --engine on FerretDB over TLS (Go crypto/tls, which only bcc
  decodes): bcc is chosen, said in one line, and the counts are FerretDB's own;
- record without --engine: the manifest says which engine and why, and the run's
  counts are FerretDB's own;
- the choice itself where bcc cannot run (its python named by MONGOPROBE_BCC_PYTHON
  has no bcc): bpftrace, with bcc's reason; no engine at all: one line naming each;
- a tracer refusing the tool (a script bpftrace rejects): its own error in one line,
  with the engine to use instead (latency), and in record's manifest;
- bpftrace ignoring the variable that sizes its maps (0.27 with only the old name,
  0.17 with only the new): the line naming it.

Needs root, bcc and bpftrace, the FerretDB build; the newer bpftrace (a Debian sid
root, scripts/tracer-roots.sh) for the last test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mongoprobe.run import engine_choice as engines, tracer as probes, run_folder as rundir, target
from mongoprobe.load import mixed_workload as mixedload
from helpers.cli import stop_cli
from helpers.ferretdb import metrics_delta

ROOT = Path(__file__).resolve().parents[1]
SID_BPFTRACE = Path.home() / ".cache" / "mongoprobe" / "bin" / "bpftrace-sid"


def _start(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, list[str]]:
    """mongoprobe ARGS, once attached: (the process, what it said on stderr before)."""
    proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    said = []
    for line in proc.stderr:
        said.append(line.rstrip("\n"))
        if line.startswith("Tracing MongoDB"):
            return proc, said
    proc.kill()
    proc.wait()
    pytest.fail(f"probe did not attach: {said}")


@pytest.mark.target           # (its own TLS FerretDB)
def test_latency_default_decodes_tls_ferretdb(tls_target, need_bcc, monkeypatch):
    """No --engine, a TLS FerretDB: bcc (the one engine that decodes Go's crypto/tls),
    said in one line; every request counted as FerretDB counts it. Sized by the real
    default, whose computed memory must match what the kernel loaded."""
    monkeypatch.delenv("MONGOPROBE_MAX_CONNECTIONS", raising=False)
    info = tls_target
    before = target.request_counts(info.metrics_url)
    cli, said = _start("latency", "-p", str(info.pid), "--json")
    try:
        load = mixedload.run(info.uri, threads=4, rounds=1)
        time.sleep(0.5)
    finally:
        out, _ = stop_cli(cli)
    chosen = [ln for ln in said if ln.startswith("mongoprobe: engine ")]
    assert len(chosen) == 1, said
    assert chosen[0].startswith(f"mongoprobe: engine bcc (bcc {probes.bcc_version()} "
                                "compiles here"), chosen
    assert "decodes the target's Go crypto/tls" in chosen[0]
    # the maps' memory computed before loading is what the kernel then accounted
    sizing = [ln for ln in said if "maps sized for" in ln]
    assert sizing and "loaded" not in sizing[0], said
    r = json.loads(out.strip().splitlines()[-1])
    assert r["engine"] == "bcc"
    counts = {k: v["count"] for k, v in r["by_command"].items()}
    assert counts == metrics_delta(before, target.request_counts(info.metrics_url))
    assert counts["insert"] == load.counts["insert"]
    assert r["lost"] == dict.fromkeys(r["lost"], 0)
    assert r["untraced"]["tls_connections"] == 0 and r["tls"]["connections"] > 0


@pytest.mark.target
def test_record_default_says_engine_and_why(tls_target, need_bcc, tmp_path):
    """record without --engine: bcc's mongolatency.py records the run; the manifest
    says which engine and why; the run's counts are FerretDB's."""
    info = tls_target
    run = tmp_path / "RUN"
    before = target.request_counts(info.metrics_url)
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "record", "-p", str(info.pid),
                        "--uri", info.uri, "-o", str(run), "--probes", "latency", "--",
                        sys.executable, "-m", "mongoprobe", "load", "--phases", "1i.1q:2s"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    after = target.request_counts(info.metrics_url)
    loaded = rundir.load_run(run)
    m = loaded.manifest
    assert m["latency_engine"]["engine"] == "bcc"
    assert m["latency_engine"]["why"].startswith("engine bcc (bcc ")
    assert "Go crypto/tls" in m["latency_engine"]["why"]
    assert m["latency_engine"]["why"] in r.stderr
    assert m["latency_tls"]["decoded"] is True
    assert m["collectors"]["latency"]["output"] == "latency.bcc.jsonl.zst"
    # the default: here the suite's small one (conftest), which record takes as a user's
    assert m["latency_sizing"]["max_connections"] == int(os.environ["MONGOPROBE_MAX_CONNECTIONS"])
    assert loaded.latency_counts == metrics_delta(before, after)


def test_auto_without_bcc_picks_bpftrace_and_says_why(monkeypatch, need_bpftrace):
    monkeypatch.setenv("MONGOPROBE_BCC_PYTHON", "/nonexistent/python3")
    probes.bcc_version.cache_clear()
    try:
        c = engines.choose(os.getpid(), "off")
        assert c.engine == "bpftrace"
        assert c.why.startswith(f"engine bpftrace (bpftrace {probes.bpftrace_version()} "
                                "runs here")
        assert "bcc not: /nonexistent/python3 cannot import bcc" in c.why
        # nothing can trace: each engine's reason, one line
        monkeypatch.setenv("MONGOPROBE_BPFTRACE", "/nonexistent/bpftrace")
        with pytest.raises(probes.ProbeError) as e:
            engines.choose(os.getpid(), "off", ("bcc", "bpftrace"))
        assert str(e.value) == (
            "no engine can trace here: bcc: /nonexistent/python3 cannot import bcc "
            "(python3-bpfcc; run scripts/setup.sh); bpftrace: "
            "MONGOPROBE_BPFTRACE=/nonexistent/bpftrace is not an executable")
    finally:
        probes.bcc_version.cache_clear()


BROKEN = "BEGIN { printf(\"%d\\n\", $never_set); }\n"


@pytest.fixture
def broken_probes(tmp_path):
    """A probes folder whose mongo_latency.bt every bpftrace refuses (tlshooks.py as
    it is: mongoprobe reads it before starting bpftrace)."""
    d = tmp_path / "probes"
    d.mkdir()
    (d / "mongo_latency.bt").write_text(BROKEN)
    shutil.copy(ROOT / "probes" / "tlshooks.py", d)
    return d


def test_a_refused_tool_says_the_tracers_error(broken_probes, ferretdb, need_bpftrace,
                                               need_bcc, tmp_path):
    env = {**os.environ, "MONGOPROBE_PROBES": str(broken_probes)}
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "latency", "-p", str(ferretdb.pid),
                        "--engine", "bpftrace", "--tls", "off", "-d", "1"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    # bpftrace 0.17: "Undefined or undeclared variable: $never_set" at line 1
    assert line.startswith(f"mongoprobe: bpftrace {probes.bpftrace_version()} cannot run "
                           "mongo_latency.bt: probes/mongo_latency.bt:1: "), line
    assert "$never_set" in line and line.endswith(" (use --engine bcc)"), line
    run = tmp_path / "RUN"
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "record", "-p", str(ferretdb.pid),
                        "-o", str(run), "--engine", "bpftrace", "--tls", "off", "--", "true"],
                       capture_output=True, text=True, timeout=120, env=env)
    lat = rundir.load_run(run).manifest["collectors"]["latency"]
    assert lat["status"] == "failed"
    assert lat["error"].startswith(f"exited before it was ready: bpftrace "
                                   f"{probes.bpftrace_version()} cannot run mongo_latency.bt: ")
    assert "$never_set" in lat["error"]


SIZED = """BEGIN { @a[1] = 1; @n[2] = count(); printf("Tracing MongoDB (test)\\n"); }
interval:s:1 { @a[2] = 2; }
"""


@pytest.mark.parametrize(("tracer", "given"), [
    ("sid", "BPFTRACE_MAP_KEYS_MAX"),       # 0.27 reads only BPFTRACE_MAX_MAP_KEYS
    ("system", "BPFTRACE_MAX_MAP_KEYS"),    # 0.17 reads only BPFTRACE_MAP_KEYS_MAX
    ("system", "both")])
def test_a_map_size_the_version_ignored_is_named(tracer, given, tmp_path, monkeypatch,
                                                 need_bpftrace):
    if tracer == "sid":
        if not os.access(SID_BPFTRACE, os.X_OK):
            pytest.skip(f"{SID_BPFTRACE} not built (scripts/tracer-roots.sh)")
        monkeypatch.setenv("MONGOPROBE_BPFTRACE", str(SID_BPFTRACE))
    probes.bpftrace_version.cache_clear()
    script = tmp_path / "sized.bt"
    script.write_text(SIZED)
    env = (probes.bpftrace_map_keys(5000) if given == "both" else {given: "5000"})
    p = probes.Probe([probes.bpftrace_binary(), str(script)], ready="Tracing MongoDB",
                     env=env, engine="bpftrace")
    try:
        said = probes.bpftrace_size_mismatch(p.proc.pid, 5000, env)
    finally:
        p.stop()
        probes.bpftrace_version.cache_clear()
    if given == "both":
        assert said is None
        return
    version = "0.27" if tracer == "sid" else "0.17"
    assert said is not None and said.startswith(f"bpftrace {version}"), said
    assert said == (f"bpftrace {said.split()[1]} ignored the map size asked: 2 of its 2 "
                    f"maps hold 4096 keys, not 5000 (given {given}=5000)")
