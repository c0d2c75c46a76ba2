"""TLS connections the probes cannot read are counted and said in one line, instead of
silence: FerretDB serving TLS (Go's crypto/tls reads whole records) and a Python `ssl`
server (OpenSSL: the 5-byte record header, then the body), traced with ``--tls off``
(the bcc engine decodes their plaintext otherwise: tests/test_tls_decode.py).

Needs root, a mounted tracefs, bpftrace or bcc, openssl, and the FerretDB build.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.tls import CliTracer, once_per_key, stop_all_or_raise
from mongoprobe.run import target, tracer as probes
from mongoprobe.wire.encode import encode_op_msg

pytestmark = pytest.mark.root

CONNECTIONS = 3


ENGINES = ("bpftrace", "bcc")


def _why_not(engine: str) -> str | None:
    """What need_bcc / need_bpftrace would skip for."""
    return probes.why_cannot_bcc() if engine == "bcc" else probes.why_cannot_trace()


def _trace(pid: int, work, workdir: Path) -> dict[str, tuple[dict, str]]:
    """`mongoprobe latency --json --tls off` of every engine that can run here, started
    together on pid (their starts overlap), while work() runs once: {engine: (its
    summary, its stderr)}."""
    tracers = {}
    try:
        for engine in ENGINES:
            if not _why_not(engine):
                tracers[engine] = CliTracer(workdir, engine, "latency", "-p", str(pid),
                                            "--json", "--engine", engine, "--tls", "off")
        for tracer in tracers.values():
            tracer.wait_attached()
        work()
        time.sleep(0.5)
    except BaseException as exc:
        stop_all_or_raise(tracers, exc)
    outputs = stop_all_or_raise(tracers)
    return {engine: (json.loads(outputs[engine][-1]), tracers[engine].stderr)
            for engine in tracers}


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    """traced(target, pid, work) -> {engine: (summary, stderr)}: _trace once per target
    for both engines' tests."""
    runs = {}

    def get(name: str, pid: int, work) -> dict[str, tuple[dict, str]]:
        if name not in runs:        # the first test of a target traces it
            runs[name] = once_per_key(lambda: _trace(pid, work, tmp_path_factory.mktemp(name)))
        return runs[name]()

    return get


def _pings(port: int, ctx: ssl.SSLContext) -> None:
    """CONNECTIONS TLS connections, each a ping whose reply is read."""
    for i in range(CONNECTIONS):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                s.sendall(encode_op_msg(i + 1, 0, {"ping": 1, "$db": "admin"}))
                assert len(s.recv(4096)) >= 16


def _check(result: dict, err: str) -> None:
    assert result["untraced"]["tls_connections"] == CONNECTIONS
    assert result["by_command"] == {}
    line = [ln for ln in err.splitlines() if ln.startswith("not traced:")]
    assert line == [f"not traced: {CONNECTIONS} connections look like TLS (records 0x16/0x17 "
                    "0x03) and no TLS library is hooked: their requests are not seen"]


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_ferretdb_tls_connections_are_counted(engine, tls_target, request, traced):
    """(Both engines trace the same pings, started together.)"""
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    ctx = ssl.create_default_context(cafile=tls_target.ca_file)
    _check(*traced("ferretdb", tls_target.pid, lambda: _pings(tls_target.port, ctx))[engine])


SERVER = r'''
import socket, ssl, sys
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
ls = socket.create_server(("127.0.0.1", 0))
print(ls.getsockname()[1], flush=True)
while True:
    c, _ = ls.accept()
    with ctx.wrap_socket(c, server_side=True) as s:
        data = s.recv(4096)
        s.sendall(data)          # echoes the request: enough for a TLS record back
'''


@pytest.fixture(scope="module")
def openssl_server(tmp_path_factory):
    """SERVER on a key made for it: (pid, port, its certificate)."""
    workdir = tmp_path_factory.mktemp("openssl")
    try:
        cert, key = target._self_signed(workdir)
    except target.TargetError as e:
        pytest.skip(str(e))
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(cert), str(key)],
                           stdout=subprocess.PIPE, text=True)
    try:
        yield srv.pid, int(srv.stdout.readline()), cert
    finally:
        srv.kill()
        srv.wait()


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_openssl_tls_connections_are_counted(engine, request, traced, openssl_server):
    """Python's ssl is OpenSSL: it reads a record's 5-byte header alone. (Both engines
    trace the same pings, started together.)"""
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    pid, port, cert = openssl_server
    ctx = ssl.create_default_context(cafile=str(cert))
    _check(*traced("openssl", pid, lambda: _pings(port, ctx))[engine])
