"""The one recorded run that test_record, test_end_to_end and test_traffic look at
(conftest's session fixture ``recorded_run``): the built-in load in four phases on the
embedded target, with every request's event, a profile, vmstat, iostat and a packet
capture, on bpftrace; iostat is killed when the second phase starts (a collector dying
mid-run). Recording it once saves two runs of 20-25 s each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

# 2i.1q and 1i@50.2q have one command mix (traffic.infer sees one phase there),
# 0i.2q has no inserts and 2i.0q no queries
SPEC = "2i.1q:3s,1i@50.2q:2s,0i.2q:3s,2i.0q:3s"
NAMES = ["2i.1q", "1i@50.2q", "0i.2q", "2i.0q"]
PROBES = "latency,profile,vmstat,iostat,pcap"
KILLED = "iostat"
LOAD = [sys.executable, "-m", "mongoprobe", "load"]


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def manifest(run: Path) -> dict:
    try:
        return json.loads((run / "manifest.json").read_text())
    except (OSError, ValueError):
        return {}


def load_text(run: Path) -> str:
    try:
        return (run / "load.out").read_text()
    except OSError:
        return ""


def record(run: Path) -> SimpleNamespace:
    """Records the run into ``run``: (path, rc, stdout, stderr, t0, t1, killed)."""
    t0 = time.time()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mongoprobe", "record", "--target", "embedded", "-o", str(run),
         "--engine", "bpftrace", "--probes", PROBES, "--events", "--", *LOAD,
         "--phases", SPEC],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed: dict = {}

    def kill_mid_run() -> None:
        try:
            wait_for(lambda: f"### phase start name={NAMES[1]}" in load_text(run), 120,
                     "the second phase")
            pid = manifest(run)["collectors"][KILLED]["pid"]
            # the time before the kill: record may see the death (died_at) before this
            # thread runs again (1 ms before, in a CI run)
            at = time.time()
            os.kill(pid, signal.SIGKILL)
            killed.update(pid=pid, at=at)
        except Exception as e:  # noqa: BLE001 - reported by the test that looks
            killed["error"] = repr(e)

    killer = threading.Thread(target=kill_mid_run, daemon=True)
    killer.start()
    out, err = proc.communicate(timeout=240)
    killer.join(5)
    return SimpleNamespace(path=run, rc=proc.returncode, stdout=out, stderr=err, t0=t0,
                           t1=time.time(), killed=killed)
