"""Thousands of connections: every engine exact at 10,000, and its state freed on close.

A plain socket client (tests/manyconns.py, one thread, a selector) opens the connections
to the embedded FerretDB and sends, round by round, a ping on every connection before
reading any reply: requests pipelined across connections (thousands outstanding at
once), every connection using the same requestID in a round. The probe runs through
``mongoprobe latency --json`` (the real CLI, the real probe) with the default
``--max-connections``; its counts must equal the client's and FerretDB's own
/debug/metrics, nothing lost. The churn tests open thousands of short connections (fds
reused) and check, while the probe still runs, that its per-connection maps are back to
(nearly) empty (bpftrace, bcc; DTrace's dynamic variables cannot be listed: exactness
only). A test with the maps sized too small checks that the loss is named with its fix.

10,000 connections need 10,000 descriptors in the client and in FerretDB (both inherit
this process's RLIMIT_NOFILE, raised towards its hard limit here); with a lower hard
limit the tests run at the highest count it allows, and fail below 5,000 saying so.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

import manyconns
from helpers.cli import start_cli
from helpers.ferretdb import metrics_delta
from mongoprobe.run import target, wire_probe

pytestmark = [pytest.mark.root, pytest.mark.scale]

CONNECTIONS = 10_000
ROUNDS = 3


def connections_possible(want: int) -> int:
    """``want``, or fewer when the descriptor limit is too low (client and server each
    need one per connection, plus a margin)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard != resource.RLIM_INFINITY else want + 512
    return min(want, limit - 512)


@pytest.fixture(scope="module")
def big_target(tmp_path_factory):
    """A private FerretDB started with this process's RLIMIT_NOFILE at its hard limit
    (it inherits it), for thousands of connections."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    manyconns.raise_nofile(CONNECTIONS + 512)
    with target.EmbeddedTarget(tmp_path_factory.mktemp("ferretdb-conns")) as info:
        yield info


@pytest.fixture(autouse=True)
def real_default(monkeypatch):
    """The probes sized by their own default (10,000 connections here), not the suite's
    small one: that default is what these tests check."""
    monkeypatch.delenv("MONGOPROBE_MAX_CONNECTIONS", raising=False)


def need(engine: str, request) -> None:
    request.getfixturevalue({"bpftrace": "need_bpftrace", "bcc": "need_bcc",
                             "dtrace": "need_dtrace"}[engine])


def port_of(info) -> int:
    return int(info.uri.rsplit(":", 1)[1].strip("/"))


def pings(info) -> int:
    return metrics_delta({}, target.request_counts(info.metrics_url)).get("ping", 0)


@pytest.mark.parametrize("engine,by", [("bpftrace", "command"), ("bcc", "command"),
                                       ("bcc", "conn"), ("dtrace", "command")])
def test_ten_thousand_connections_exact(engine, by, big_target, request):
    need(engine, request)
    n = connections_possible(CONNECTIONS)
    assert n >= 5000, f"RLIMIT_NOFILE allows only {n} connections"
    before = pings(big_target)
    cli = start_cli("latency", "-p", str(big_target.pid), "--json", "--engine", engine,
                    "--by", by)
    try:
        answered = manyconns.rounds("127.0.0.1", port_of(big_target), n, ROUNDS)
        time.sleep(1.0)
    finally:
        out, err = stop(cli)
    sent = n * ROUNDS
    assert answered == sent
    assert pings(big_target) - before == sent      # FerretDB's own count
    result = json.loads(out.strip().splitlines()[-1])
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}, (result["counts"], err)
    assert result["by_command"]["ping"]["count"] == sent
    if by == "conn":
        # every connection's aggregate kept (per-connection view)
        assert sum(v["count"] for v in result["by_conn"].values()) >= sent


def stop(cli: subprocess.Popen) -> tuple[str, str]:
    cli.send_signal(signal.SIGINT)
    out, err = cli.communicate(timeout=180)
    assert cli.returncode == 0, err
    return out, err


def map_entries(pid: int, names: set[str]) -> dict[str, int]:
    """Entries of the maps named ``names`` that process ``pid`` holds (bpftool)."""
    ids = set()
    for fdinfo in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            for line in fdinfo.read_text().splitlines():
                if line.startswith("map_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            pass
    out = {}
    for i in ids:
        show = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(i), "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        if show.get("name") in names and show.get("type") == "array":
            out[show["name"]] = live_slots(i)
        elif show.get("name") in names:
            dump = subprocess.run(["bpftool", "map", "dump", "id", str(i), "--json"],
                                  capture_output=True, text=True, check=True).stdout
            out[show["name"]] = len(json.loads(dump))
    return out


def live_slots(map_id: int, field: str = "live") -> int:
    """Slots of an array map of structs (bcc's conns) whose one-byte member ``field`` is
    set, read with bpf(2) itself: bpftool's dump of 20,000 values of 584 bytes is ~100 MB
    of JSON. The member's offset comes from the map's BTF."""
    show = json.loads(subprocess.run(["bpftool", "map", "show", "id", str(map_id), "--json"],
                                     capture_output=True, text=True, check=True).stdout)
    btf = subprocess.run(["bpftool", "btf", "dump", "map", "id", str(map_id), "format", "raw"],
                         capture_output=True, text=True, check=True).stdout
    offset = int(re.search(rf"'{field}' type_id=\d+ bits_offset=(\d+)", btf).group(1)) // 8
    nr = {"x86_64": 321, "aarch64": 280}[platform.machine()]
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(128)
    ctypes.c_uint32.from_buffer(attr, 0).value = map_id
    fd = libc.syscall(nr, 14, attr, 128)        # BPF_MAP_GET_FD_BY_ID
    assert fd >= 0, os.strerror(ctypes.get_errno())
    try:
        key, value = ctypes.c_uint32(), ctypes.create_string_buffer(show["bytes_value"])
        attr = ctypes.create_string_buffer(128)
        ctypes.c_uint32.from_buffer(attr, 0).value = fd
        ctypes.c_uint64.from_buffer(attr, 8).value = ctypes.addressof(key)
        ctypes.c_uint64.from_buffer(attr, 16).value = ctypes.addressof(value)
        live = 0
        for i in range(show["max_entries"]):
            key.value = i
            assert libc.syscall(nr, 1, attr, 128) == 0, os.strerror(ctypes.get_errno())
            live += value.raw[offset] != 0      # BPF_MAP_LOOKUP_ELEM, above
        return live
    finally:
        os.close(fd)


# the per-connection maps of each engine (kernel names: bpftrace prefixes AT_); bcc's
# conns is an array: its live slots are counted, conn_ix maps the fds beyond its first half
CONN_MAPS = {"bpftrace": {"AT_conn", "AT_slot_cmd", "AT_slot_hdr", "AT_rx_pending", "AT_tx_kept",
                          "AT_stream_rid"},
             "bcc": {"conns", "conn_ix"}}


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_churn_frees_connection_state(engine, big_target, request):
    """6,000 short connections, 200 at a time (their fds reused): exact, and the
    per-connection maps back to (nearly) empty while the probe still runs."""
    need(engine, request)
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool is not installed (Debian package bpftool)")
    wp = wire_probe.WireProbe(engine, big_target.pid)
    try:
        answered = manyconns.churn("127.0.0.1", port_of(big_target), 6000, at_once=200)
        time.sleep(0.5)
        left = map_entries(wp.probe.proc.pid, CONN_MAPS[engine])
    finally:
        wp.probe.stop()
    for _ in wp.slices():      # what it printed, to its end
        pass
    lat = wp.finish()
    wp.close()
    assert answered == 6000
    assert lat.lost == {"unmatched_replies": 0, "requests_without_reply": 0,
                        "malformed": 0, "dropped": 0}
    assert lat.counts["replies"] == 6000
    # a handful of FerretDB's own descriptors at most; 6,000 if close() freed nothing
    assert set(left) == CONN_MAPS[engine], left
    assert all(n <= 8 for n in left.values()), left


def test_churn_exact_on_dtrace(big_target, request):
    """12,000 short connections (fds reused) through the smallest dynvarsize, 16m:
    exact, no dynamic variable dropped. (DTrace cannot list its dynamic variables, so
    that close() frees a connection's is not checked here: with fds reused, state left
    behind would be overwritten, not grow.)"""
    need("dtrace", request)
    cli = start_cli("latency", "-p", str(big_target.pid), "--json", "--engine", "dtrace",
                    "--max-connections", "1000")
    try:
        answered = manyconns.churn("127.0.0.1", port_of(big_target), 12000, at_once=200)
        time.sleep(1.0)
    finally:
        out, err = stop(cli)
    assert answered == 12000
    result = json.loads(out.strip().splitlines()[-1])
    assert result["counts"]["replies"] == 12000
    assert result["lost"] == {"unmatched_replies": 0, "requests_without_reply": 0,
                              "malformed": 0, "dropped": 0}, err
    assert "DTrace reported no drops or errors" in err


# what a full map is called in each engine's hint (DTrace: its own buffers, of which
# -x aggsize fills first; its minimum, 4m, holds fewer than 3,000 connections)
TOO_SMALL = {"bpftrace": (1500, "map @slot_cmd full"), "bcc": (1500, "map conns full"),
             "dtrace": (3000, "aggregation space full")}


@pytest.mark.parametrize("engine", list(TOO_SMALL))
def test_too_small_maps_are_named(engine, big_target, request):
    """--max-connections below the connections: the loss is counted, and the map that
    filled and the fix are named once at the end."""
    need(engine, request)
    conns, want = TOO_SMALL[engine]
    cli = start_cli("latency", "-p", str(big_target.pid), "--json", "--engine", engine,
                    "--max-connections", "500")
    try:
        manyconns.rounds("127.0.0.1", port_of(big_target), conns, 5)
        time.sleep(1.0)
    finally:
        out, err = stop(cli)
    lost = json.loads(out.strip().splitlines()[-1])["lost"]
    assert sum(lost.values()) > 0
    hints = [ln for ln in err.splitlines() if " full: " in ln]
    assert len(hints) == 1, err
    assert want in hints[0] and "raise --max-connections (now 500)" in hints[0]
