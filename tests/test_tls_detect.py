"""TLS connections the probes cannot read are counted and said in one line, instead of
silence: FerretDB serving TLS (Go's crypto/tls reads whole records) and a Python `ssl`
server (OpenSSL: the 5-byte record header, then the body), traced with ``--tls off``
(the bcc engine decodes their plaintext otherwise: tests/test_tls_decode.py).

Needs root, a mounted tracefs, bpftrace or bcc, openssl, and the FerretDB build.
"""

from __future__ import annotations

import json
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest

from mongoprobe.run import target
from mongoprobe.wire.encode import encode_op_msg

pytestmark = pytest.mark.root

CONNECTIONS = 3


def _trace(pid: int, engine: str, work) -> tuple[dict, str]:
    cli = subprocess.Popen([sys.executable, "-m", "mongoprobe", "latency", "-p", str(pid),
                            "--json", "--engine", engine, "--tls", "off"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    for line in cli.stderr:            # "Tracing ..." once the probe is attached
        if line.startswith("Tracing MongoDB") or time.monotonic() > deadline:
            break
    try:
        work()
        time.sleep(0.5)
    finally:
        cli.send_signal(signal.SIGINT)
        out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    return json.loads(out.strip().splitlines()[-1]), err


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
def test_ferretdb_tls_connections_are_counted(engine, tls_target, request):
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    ctx = ssl.create_default_context(cafile=tls_target.ca_file)
    _check(*_trace(tls_target.pid, engine, lambda: _pings(tls_target.port, ctx)))


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


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_openssl_tls_connections_are_counted(engine, tmp_path, request):
    """Python's ssl is OpenSSL: it reads a record's 5-byte header alone."""
    request.getfixturevalue("need_bcc" if engine == "bcc" else "need_bpftrace")
    try:
        cert, key = target._self_signed(tmp_path)
    except target.TargetError as e:
        pytest.skip(str(e))
    srv = subprocess.Popen([sys.executable, "-c", SERVER, str(cert), str(key)],
                           stdout=subprocess.PIPE, text=True)
    try:
        port = int(srv.stdout.readline())
        ctx = ssl.create_default_context(cafile=str(cert))
        _check(*_trace(srv.pid, engine, lambda: _pings(port, ctx)))
    finally:
        srv.kill()
        srv.wait()
