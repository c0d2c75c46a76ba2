"""What the wire probes pin in kernel memory, computed before they load
(``mongoprobe.run.map_memory``): checked against the kernel's own accounting of the real
tool here, kept under 256 MB by default on a 64-CPU machine for every engine, and
refused, before loading, when the sizes asked would take over a quarter of the
memory available.
"""

from __future__ import annotations

import struct
import subprocess
import sys

import pytest

from mongoprobe.run import dtrace_runner as dtrace_engine, map_memory as mapmem, tracer as probes

MB = 1 << 20


@pytest.fixture(autouse=True)
def real_default(monkeypatch):
    """The defaults as a user gets them: without the suite's small test default."""
    monkeypatch.delenv("MONGOPROBE_MAX_CONNECTIONS", raising=False)


def test_possible_cpus_ranges():
    assert probes.possible_cpus("0-63\n") == 64
    assert probes.possible_cpus("0,2-5\n") == 5
    assert probes.possible_cpus("0\n") == 1
    assert probes.possible_cpus() >= 1


@pytest.mark.parametrize("script", ["mongo_latency.bt", "mongo_latency_tls.bt"])
def test_bpftrace_default_under_budget_on_64_cpus(script):
    """bpftrace 0.17 sizes every map alike, and 23 of mongo_latency.bt's are per-CPU:
    at 10,000 connections they would take 700 MB on 64 CPUs, so the default is lowered
    there (and kept at 10,000 on 2 CPUs for the syscall tool: 230 MB)."""
    assert mapmem.wire_bytes("bpftrace", script, 10000, 64) > 600 * MB
    n = mapmem.default_connections("bpftrace", script, 64)
    assert 1000 < n < 10000
    assert mapmem.wire_bytes("bpftrace", script, n, 64) < mapmem.BUDGET
    assert mapmem.wire_bytes("bpftrace", script, n + 1, 64) >= mapmem.BUDGET
    assert mapmem.default_connections("bpftrace", "mongo_latency.bt", 2) == 10000
    # the per-CPU maps are most of it
    kinds = dict(mapmem.bpftrace_dominant(script, 40000, 64))
    assert kinds["percpu_hash"] > 4 * kinds["hash"]


@pytest.mark.parametrize("events", [False, True])
def test_bcc_default_under_budget_on_64_cpus(events):
    assert mapmem.default_connections("bcc", "mongolatency.py", 64, events) == 10000
    assert mapmem.wire_bytes("bcc", "mongolatency.py", 10000, 64, events) < 64 * MB


@pytest.mark.parametrize("script", ["mongo_time.d", "mongo_snoop.d"])
def test_dtrace_default_under_budget_on_64_cpus(script):
    """mongo_time.d's aggregation buffer is per CPU (aggsize each): its floor of 4m
    alone is 277 MB on 64 CPUs, so aggsize is lowered to fit."""
    n, options, size = mapmem.dtrace_sized(script, None, 64)
    assert size < mapmem.BUDGET and n == 10000
    assert mapmem.dtrace_bytes(options, 64) == size
    # as asked, never changed
    asked = mapmem.dtrace_sized(script, 20000, 64)
    assert asked[1] == dtrace_engine.wire_options(script, 20000)


def test_dtrace_aggregation_space_grows_with_connections_only_by_conn():
    """Without --by conn mongo_time.d keeps no aggregation per connection (its NO_CONN
    argument): its aggregation space stays at the 4m floor instead of 8 KB a
    connection per CPU, and on 8 CPUs the default of 10,000 connections then fits."""
    assert dtrace_engine.wire_options("mongo_time.d", 10000) == ("dynvarsize=40m",
                                                                 "aggsize=79m")
    assert dtrace_engine.wire_options("mongo_time.d", 10000, by_conn=False) == (
        "dynvarsize=40m", "aggsize=4m")
    assert mapmem.default_connections("dtrace", "mongo_time.d", 8) < 10000
    n, options, size = mapmem.dtrace_sized("mongo_time.d", None, 8, by_conn=False)
    assert (n, options) == (10000, ("dynvarsize=40m", "aggsize=4m")) and size < mapmem.BUDGET


def test_bpftrace_model_is_the_kernels_accounting(ferretdb, need_bpftrace):
    """mongo_latency.bt sized for 1,250 connections (5,000 keys), run here: the kernel's
    memlock of its maps is what the model computed before loading, to the byte."""
    from mongoprobe.run import wire_probe
    wp = wire_probe.WireProbe("bpftrace", ferretdb.pid, max_connections=1250, tls="off")
    try:
        measured = wp.map_bytes
    finally:
        wp.probe.stop()
        wp.close()
    assert measured == mapmem.wire_bytes("bpftrace", "mongo_latency.bt", 1250,
                                         probes.possible_cpus())
    assert wp.estimate == measured and "loaded" not in wp.sizing()


def test_too_much_is_refused_before_loading(ferretdb, need_bpftrace):
    """Sizes that would pin over a quarter of MemAvailable: one line naming the option,
    and nothing loaded (no tracer started: it answers at once). Sized over a quarter of
    MemTotal, which MemAvailable never exceeds: the other tests' memory comes and goes
    (sized on MemAvailable as this test read it, a CI run's CLI read more, and loaded)."""
    total = probes.meminfo("MemTotal")
    n = 2
    while mapmem.wire_bytes("bpftrace", "mongo_latency.bt", n, probes.possible_cpus()) \
            <= total // 4:
        n *= 2
    r = subprocess.run([sys.executable, "-m", "mongoprobe", "latency", "-p", str(ferretdb.pid),
                        "--engine", "bpftrace", "--tls", "off", "--max-connections", str(n),
                        "-d", "1"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"mongoprobe: mongo_latency.bt: maps sized for {n} connections "
                           "would pin "), line
    assert "over a quarter of the" in line and line.endswith(": lower --max-connections")
    assert "Tracing" not in r.stderr


def test_struct_sizes_read_from_btf(tmp_path):
    """kernel_btf reads a struct's size from BTF as the kernel lays it out: a header,
    the types (an INT, a STRUCT of two members, a PTR), the strings; a file that is
    not BTF gives nothing (the model then keeps its own sizes)."""
    from mongoprobe.run import kernel_btf

    strings = b"\0int\0bpf_htab\0a\0b\0"
    types = (struct.pack("<III", 1, 1 << 24, 4) + struct.pack("<I", 32)     # INT
             + struct.pack("<III", 5, (4 << 24) | 2, 896)                   # STRUCT
             + struct.pack("<III", 14, 1, 0) + struct.pack("<III", 16, 1, 64)
             + struct.pack("<III", 0, 2 << 24, 1))                          # PTR
    head = struct.pack("<HBBIIIII", 0xEB9F, 1, 0, 24, 0, len(types), len(types),
                       len(strings))
    (tmp_path / "vmlinux").write_bytes(head + types + strings)
    assert kernel_btf.struct_sizes(tmp_path / "vmlinux") == {"bpf_htab": 896}
    (tmp_path / "other").write_bytes(b"\x7fELF" + bytes(40))
    assert kernel_btf.struct_sizes(tmp_path / "other") == {}
    assert kernel_btf.struct_sizes(tmp_path / "absent") == {}
