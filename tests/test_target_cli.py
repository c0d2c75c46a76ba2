"""mongoprobe target start|stop|status and the CLI's one-line errors, for real."""

from __future__ import annotations

import json
import os

import pytest

from helpers.cli import mp
from mongoprobe.run import target


@pytest.mark.target
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


@pytest.mark.target
def test_tls_target_serves_tls_only_and_counts_requests(tmp_path):
    """target start --tls: pymongo over TLS with the URI as given; FerretDB counts each
    request; a plain connection gets no MongoDB reply; the server speaks TLS records."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    import shutil
    import socket

    if shutil.which("openssl") is None:
        pytest.skip("openssl not installed (it makes the TLS target's certificate)")
    env = {"MONGOPROBE_TARGET_DIR": str(tmp_path)}
    r = mp("target", "start", "--tls", "--json", env=env)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    try:
        assert info["tls"] is True and "tls=true" in info["uri"] and "tlsCAFile=" in info["uri"]
        assert json.loads(mp("target", "status", "--json", env=env).stdout)["uri"] == info["uri"]
        import pymongo
        with pymongo.MongoClient(info["uri"], serverSelectionTimeoutMS=10000) as c:
            coll = c.tlsdb.t
            coll.insert_many([{"i": i} for i in range(5)])
            assert [d["i"] for d in coll.find({}, {"_id": 0}).sort("i")] == list(range(5))
        counts = target.request_counts(info["metrics_url"])
        assert counts[("OP_MSG", "insert")] == 1 and counts[("OP_MSG", "find")] == 1
        # a TLS handshake completes against the certificate the target made
        import ssl
        ctx = ssl.create_default_context(cafile=info["ca_file"])
        with socket.create_connection(("127.0.0.1", info["port"]), timeout=5) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                assert s.version() in ("TLSv1.2", "TLSv1.3")
        # plain MongoDB wire bytes get no reply: the port serves TLS only
        with pymongo.MongoClient(f"mongodb://127.0.0.1:{info['port']}/",
                                 serverSelectionTimeoutMS=1500) as plain:
            with pytest.raises(pymongo.errors.ServerSelectionTimeoutError):
                plain.admin.command("ping")
    finally:
        assert mp("target", "stop", env=env).returncode == 0
