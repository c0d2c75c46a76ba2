"""mongoprobe target start|stop|status and the CLI's one-line errors, for real."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mongoprobe import target


def mp(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mongoprobe", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


def test_target_start_status_stop_leaves_no_process(tmp_path):
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    env = {"MONGOPROBE_TARGET_DIR": str(tmp_path)}
    r = mp("target", "start", "--json", env=env)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    try:
        assert set(info) >= {"pid", "uri", "metrics_url"}
        st = json.loads(mp("target", "status", "--json", env=env).stdout)
        assert st["pid"] == info["pid"] and st["uri"] == info["uri"]
        import pymongo
        with pymongo.MongoClient(info["uri"], serverSelectionTimeoutMS=10000) as c:
            assert c.admin.command("ping")["ok"] == 1
        counts = target.request_counts(info["metrics_url"])
        assert counts[("OP_MSG", "ping")] == 1
    finally:
        assert mp("target", "stop", env=env).returncode == 0
    assert not os.path.exists(f"/proc/{info['pid']}") or \
        open(f"/proc/{info['pid']}/stat").read().split(")")[1].split()[0] == "Z"
    r = mp("target", "status", env=env)
    assert r.returncode == 1 and r.stdout.strip() == "not running"


def test_latency_on_a_missing_pid_is_one_clear_line(need_bpftrace):
    r = mp("latency", "-p", "999999", "-d", "1")
    assert r.returncode == 1
    assert r.stderr.strip() == "mongoprobe: no process with pid 999999"
    assert r.stdout == ""
