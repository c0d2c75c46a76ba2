"""bcc's uprobes on a TLS library coexist with another tracer's on the same functions.

Debian's python3-bpfcc 0.26 calls libbcc's seven-argument bpf_attach_uprobe with six:
its ref_ctr_offset (a USDT semaphore the kernel increments in the target's memory)
is then stack garbage, and the kernel refuses a uprobe whose ref_ctr_offset differs
from that of one already at the address ("ref_ctr_offset mismatch" in dmesg): with
bpftrace on SSL_read first, mongolatency.py --tls on could not attach at all.
probes/mongolatency.py fix_uprobe_binding passes 0, as bpftrace and DTrace do.

Needs root, bcc (python3-bpfcc), bpftrace, and a python3 that links libssl.
"""

from __future__ import annotations

import select
import subprocess
import time

import pytest

from helpers.wire import BCC_TOOL, SYSTEM_PYTHON, tool_unavailable

pytestmark = pytest.mark.root


def libssl_of(pid: int) -> str | None:
    for line in open(f"/proc/{pid}/maps"):
        if "libssl.so" in line:
            return line.split()[-1]
    return None


def test_bcc_tls_uprobes_attach_beside_bpftrace_ones(tmp_path):
    for tool in ("bcc", "bpftrace"):
        if reason := tool_unavailable(tool):
            pytest.skip(reason)
    server = subprocess.Popen([SYSTEM_PYTHON, "-c", "import ssl, time; time.sleep(120)"])
    other = probe = None
    try:
        deadline = time.monotonic() + 10
        while (path := libssl_of(server.pid)) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if path is None:
            pytest.skip(f"{SYSTEM_PYTHON} does not map libssl")
        # another tracer first, on a function the bcc probe hooks
        other = subprocess.Popen(["bpftrace", "-e", f"uprobe:{path}:SSL_read "
                                  f"/pid == {server.pid}/ {{ @calls = count(); }}"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        said, deadline = [], time.monotonic() + 60
        while not (said and said[-1].startswith("Attaching")):
            ready, _, _ = select.select([other.stdout], [], [], max(0, deadline - time.monotonic()))
            line = other.stdout.readline() if ready else ""
            assert line, f"bpftrace did not attach: {''.join(said)}"
            said.append(line)
        probe = subprocess.run([SYSTEM_PYTHON, str(BCC_TOOL), "-p", str(server.pid),
                                "--tls", "on", "1", "1"],
                               capture_output=True, text=True, timeout=120)
        assert probe.returncode == 0, probe.stderr
        assert "cannot attach" not in probe.stderr
        assert "TLS plaintext from OpenSSL" in probe.stderr, probe.stderr
    finally:
        for p in (other, server):
            if p is not None:
                p.terminate()
                p.wait(10)
