"""wireclient's scenarios over TLS against tests/wireserver.py --tls under a probe (the
embedded FerretDB serving TLS is the session fixture ``tls_target`` in conftest.py)."""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import wireclient
from helpers.wire import CONNECTIONS, Probe, wireserver


def traced_tls_scenarios(mode: str, workdir: Path, cert_key: tuple[Path, Path],
                         start_probe: Callable[[int], Probe], bio: str = "socket"):
    """wireclient's scenarios on CONNECTIONS connections over TLS against wireserver
    --tls in mode (on BIO), traced by the probe start_probe(pid) starts: (what the
    client expects, the probe's output lines, the probe)."""
    with wireserver(mode, workdir, cert_key, ("--tls-bio", bio)) as (pid, port):
        probe = start_probe(pid)
        try:
            probe.wait_attached()
            ctx = ssl.create_default_context(cafile=str(cert_key[0]))
            expected = wireclient.run(port, connections=CONNECTIONS, tls=ctx)
            time.sleep(0.3)
        finally:
            lines = probe.stop()
    if probe.proc.returncode != 0:
        pytest.fail(f"probe failed: {probe.describe()}")
    return expected, lines, probe
