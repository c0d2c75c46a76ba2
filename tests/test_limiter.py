"""The verdict's rule and its inputs, offline and on real samples (the injected real runs
are in test_verdicts.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from mongoprobe import load_run
from mongoprobe.analysis import limiter, phase_table as phases
from mongoprobe.model import stack_samples as stacks
from mongoprobe.run import treestat

ROOT = Path(__file__).resolve().parents[1]
OFFCPU = ROOT / "samples/profile/ferretdb-offcpu.bt.txt"
RUN = ROOT / "samples/load/run-ferretdb"


def test_offcpu_reasons_of_real_ferretdb_stacks():
    df = stacks.load(OFFCPU, bucket=None)
    reason = df["frames"].map(limiter.offcpu_reason)
    fsync = df["frames"].str.contains("Xfsync")
    busy = df["frames"].str.contains("_unixSleep")
    assert fsync.any() and busy.any()
    assert (reason[fsync] == "disk").all()
    # SQLite's busy handler sleeping on SQLITE_BUSY is a lock wait
    assert (reason[busy & ~fsync] == "lock").all()
    waiting = df["frames"].str.contains("epoll_pwait") & ~fsync & ~busy
    assert (reason[waiting] == "idle").all()
    assert set(reason) <= {"disk", "lock", "downstream", "preempted", "idle", "other"}


def _fig(**kw) -> limiter.Figures:
    base = dict(phase="p", seconds=10.0, ncpu=2, ops=100.0, server_s=1.0, server_us=10_000.0,
                outside_s=0.2, outside_how="gaps", conns=4, srv_cpu=0.5, srv_runq=0.05,
                tool_cpu=0.1, tool_runq=0.0, sendq=0.0,
                off={"disk": 0.0, "lock": 0.0, "downstream": 0.0, "idle": 5.0})
    base.update(kw)
    return limiter.Figures(**base)


def test_lock_waits_behind_a_flush_are_the_disks_queue():
    v = limiter.decide(_fig(off={"disk": 0.95, "lock": 2.5, "idle": 1.0}))
    assert v.limiter.resource == "server-disk"
    assert any("queue behind a flush" in e for e in v.limiter.evidence)
    # without the flush in flight most of the time, the lock is the limit
    v = limiter.decide(_fig(off={"disk": 0.1, "lock": 2.5, "idle": 1.0}))
    assert v.limiter.resource == "server-lock"


def test_an_idle_tool_and_an_idle_server_is_none():
    v = limiter.decide(_fig(outside_s=3.5, tool_cpu=0.05, tool_runq=0.0, srv_cpu=0.2,
                            srv_runq=0.01))
    assert v.decided and v.limiter.resource == "none"
    assert v.limiter.evidence[0].startswith("nothing saturated")
    # a server queued for a CPU on a busy machine does not limit a paced tool
    v = limiter.decide(_fig(outside_s=3.5, tool_cpu=0.05, tool_runq=0.0, srv_cpu=0.2,
                            srv_runq=0.3))
    assert v.limiter.resource == "none"
    assert "paced" in v.limiter.evidence[0]


def test_time_outside_the_server_is_the_network_only_with_queued_bytes():
    quiet = limiter.decide(_fig(outside_s=3.5, sendq=0.0))
    assert quiet.limiter.resource != "network"
    shaped = limiter.decide(_fig(outside_s=3.5, sendq=20_000.0))
    assert shaped.limiter.resource == "network"
    assert shaped.limiter.share > 0.5


def test_more_requests_inside_than_cores_all_on_cpu_is_the_servers_cpu():
    """A Go server queues the goroutines beyond its threads itself: the kernel's run
    queue stays short while more requests than cores want a CPU (a real SQLite query
    phase: 3.94 requests inside on 2 cores, 1.65 cores used, 0.18 s/s queued)."""
    busy = dict(server_s=3.94, outside_s=0.02, srv_cpu=1.65, srv_runq=0.18,
                off={"disk": 0.0, "lock": 0.0, "downstream": 0.0, "other": 0.01,
                     "idle": 6.0})
    v = limiter.decide(_fig(**busy))
    assert v.limiter.resource == "server-cpu" and v.limiter.saturated
    assert any("3.94 requests inside the server on 2 cores" in e
               for e in v.limiter.evidence)
    # as many requests inside, but most of their time blocked: not the CPU's demand
    v = limiter.decide(_fig(**{**busy, "off": {"lock": 2.0, "idle": 6.0}}))
    assert v.limiter.resource == "server-lock"
    # fewer requests inside than cores: the CPU has room
    v = limiter.decide(_fig(**{**busy, "server_s": 1.5}))
    assert v.limiter.resource != "server-cpu"


def test_a_throttled_tool_is_the_load_tool():
    v = limiter.decide(_fig(outside_s=3.0, tool_cpu=0.1, tool_runq=2.5))
    assert v.limiter.resource == "load-tool"


def test_missing_offcpu_decides_only_above_its_bound():
    # the server's unrecorded waits are at most server_s - its CPU time: 0.45 s/s
    v = limiter.decide(_fig(off=None, outside_s=3.0, tool_cpu=0.1, tool_runq=2.5))
    assert v.decided and v.limiter.resource == "load-tool"
    # a server CPU share below what the unrecorded waits could be is not a verdict
    v = limiter.decide(_fig(off=None, server_s=3.9, srv_cpu=0.5, srv_runq=0.5,
                            outside_s=0.0, missing=["offcpu: record --probes offcpu"]))
    assert not v.decided
    assert "record --probes offcpu" in v.limiter.evidence[0]


def test_no_verdict_without_the_time_outside_the_server():
    # a paced tool or a shaped path would be unseen: no verdict, the option named
    v = limiter.decide(_fig(outside_s=None, srv_cpu=0.1, srv_runq=0.2,
                            missing=["time outside the server: record --events"]))
    assert not v.decided and "record --events" in v.limiter.evidence[0]


# --- a downstream (PostgreSQL's processes behind FerretDB): its figures name the wait ---
# Figures shaped like test_verdicts' PostgreSQL runs: FerretDB's own threads idle in Go's
# netpoller while its requests wait on the backends.


def _pg(**kw) -> limiter.Figures:
    base = dict(server_s=3.0, srv_cpu=0.3, srv_runq=0.02, down_cpu=0.2, down_runq=0.01,
                down_flush=0.0, down_lock=0.0, down_other=0.0,
                off={"disk": 0.0, "lock": 0.0, "downstream": 2.6, "idle": 5.0})
    base.update(kw)
    return _fig(**base)


def test_a_downstreams_flush_is_the_disk_reached_through_it():
    v = limiter.decide(_pg(down_flush=0.8, down_lock=1.9, down_flush_by={"backend": 0.8}))
    assert v.limiter.resource == "server-disk"
    ev = v.limiter.evidence
    assert "fsync/fdatasync 0.80 s/s (backend 0.80)" in ev[0]
    assert "reached through another process" in ev[0]
    # the backends' lock waits queue behind the flush: the disk's, not the lock's
    assert "queue behind a flush" in ev[1]
    assert next(x.share for x in v.limits if x.resource == "server-lock") == 0.0


def test_a_downstreams_cpu_counts_as_the_servers():
    # the backends busy, the wait all CPU: server-cpu, the downstream's part named
    v = limiter.decide(_pg(down_cpu=1.6, down_runq=1.1, ncpu=2))
    assert v.limiter.resource == "server-cpu"
    assert "its downstream's 1.60 and 1.10 of them" in v.limiter.evidence[1]
    down = next(x for x in v.limits if x.resource == "server-downstream")
    assert down.share == 0.0 and not down.saturated


def test_a_downstreams_unnamed_wait_is_server_downstream():
    # its backends serving but blocked in syscalls that are neither flush nor lock
    v = limiter.decide(_pg(down_other=2.4))
    assert v.limiter.resource == "server-downstream"
    assert v.limiter.evidence[0].startswith("requests waited on another process 2.68 s/s")
    # the wait its processes do not account for is the server's own queueing, said so
    v = limiter.decide(_pg(down_other=1.0))
    assert "1.47 s/s of the wait not in its processes" in " ".join(
        next(x for x in v.limits if x.resource == "server-downstream").evidence)


def test_without_sampled_waits_the_unexplained_wait_is_the_downstreams():
    # treestat v1: no flush/lock/other samples; what its CPU does not explain is counted
    v = limiter.decide(_pg(down_flush=None, down_lock=None, down_other=None))
    down = next(x for x in v.limits if x.resource == "server-downstream")
    assert "not sampled" in down.evidence[-1]
    assert v.limiter.resource == "server-downstream"


def test_a_run_without_the_verdicts_inputs_names_them():
    j = phases.phase_json(load_run(RUN))
    for p in j["phases"]:
        assert p["limiter"]["decided"] is False
        assert p["limiter"]["resource"] in limiter.RESOURCES
        text = " ".join(p["evidence_missing"])
        assert "treestat.txt" in text and "record --probes offcpu" in text


def test_the_text_fits_80_columns():
    t = phases.phase_table(load_run(RUN))
    out = phases.render(t)
    assert out.startswith("what limits each phase")
    assert all(len(s) < 80 for s in out.splitlines())


def test_treestat_a_busy_process_is_always_running_or_runnable(tmp_path):
    busy = subprocess.Popen([sys.executable, "-c",
                             "import time\nt = time.time()\nwhile time.time() < t + 3: pass"],
                            start_new_session=True)
    try:
        s = treestat.Sampler(tmp_path / "treestat.txt", busy.pid, busy.pid, interval=0.5)
        s.start()
        time.sleep(2)
        s.stop()
    finally:
        busy.wait()
    df = treestat.read(tmp_path / "treestat.txt")
    tool = df[(df["role"] == "tool") & (df["seconds"] > 0.4)]
    assert len(tool) >= 3
    # one thread that never blocks: on a CPU or waiting for one the whole time,
    # however busy the machine is (over the samples: the kernel adds a wait to
    # run_delay when it ends, so one interval can hold a piece of the one before)
    ratio = (tool["cpu_s"] + tool["runq_s"]).sum() / tool["seconds"].sum()
    assert 0.8 <= ratio <= 1.1, tool
    assert (df.loc[df["role"] == "server", "procs"] == 1).all()


def test_treestat_reads_what_it_writes_and_refuses_garbage(tmp_path):
    p = tmp_path / "t.txt"
    p.write_text(treestat.HEADER + "\n1.0 server 1.0 0.5 0.1 1 3 0 0\nnot a line\n")
    from mongoprobe.formats.errors import FormatError
    with pytest.raises(FormatError, match="t.txt:3"):
        treestat.read(p)


def test_a_cut_offcpu_file_is_named_not_a_crash(tmp_path, capsys):
    """A collector killed while printing (record stops it 60 s after SIGINT) leaves its
    output cut inside a map entry: phases names it, the verdict waits for it (bpftrace
    prints a map's largest entries last, so the rest would be a biased sample), and
    nothing else is lost."""
    import json
    import shutil

    from mongoprobe import cli

    run = tmp_path / "RUN"
    shutil.copytree(ROOT / "samples/load/run-ferretdb", run)
    lines = OFFCPU.read_text().splitlines(keepends=True)
    half = next(i for i, ln in enumerate(lines) if i > len(lines) // 2 and ln.startswith("@["))
    (run / "offcpu.bt.txt").write_text("".join(lines[:half + 3]))      # inside an entry
    m = json.loads((run / "manifest.json").read_text())
    m["collectors"]["offcpu"] = {"kind": "probe", "output": "offcpu.bt.txt",
                                 "format": "bpftrace-text", "status": "stopped", "cut": True,
                                 "note": "did not end 60s after SIGINT; killed (its output "
                                         "is cut)"}
    (run / "manifest.json").write_text(json.dumps(m))
    assert cli.main(["phases", str(run)]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())            # the lines are wrapped at 80 columns
    assert "lost: offcpu stacks unreadable, none used: " in flat
    assert "the input ends inside it" in flat
    assert "lost: collector offcpu cut: did not end 60s after SIGINT" in flat
