"""The embedded default target: a real FerretDB (SQLite backend) on loopback.

FerretDB v1.24.0 is built from the Go module proxy by scripts/setup.sh into the
tool folder (``$MONGOPROBE_TOOLS``, default ``~/.cache/mongoprobe``). A started
target lives in a state directory holding its data, log and ``target.json``
(pid, uri, metrics_url, ports), so ``status`` and ``stop`` work from another
process. Its ``/debug/metrics`` endpoint counts requests per command: the ground
truth the probes are checked against.

With ``backend="postgresql"`` FerretDB stores its data in a private PostgreSQL
(Debian's ``postgresql`` package, its newest ``/usr/lib/postgresql/N/bin``): a cluster
made by ``initdb`` in ``STATE/pg`` (owned by the ``postgres`` user, trust
authentication on a Unix socket and 127.0.0.1 only), started before FerretDB and
stopped after it; ``backend_pid`` is its postmaster, whose children (one backend per
FerretDB connection) do the storage work. ``backend_wrapper`` runs the postmaster under
a command (``strace -f ... --``, to inject faults into every PostgreSQL process).

With ``tls=True`` it serves TLS only (``--listen-tls``, no plain port), with a
self-signed certificate for 127.0.0.1 made at start by ``openssl`` in
``STATE/tls/``; the URI carries what a client needs
(``?tls=true&tlsCAFile=STATE/tls/cert.pem``), as production deployments that encrypt
client traffic do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass
from pathlib import Path

FERRETDB_VERSION = "v1.24.0"


class TargetError(RuntimeError):
    """The target could not be started, found or stopped."""


def tools_dir() -> Path:
    return Path(os.environ.get("MONGOPROBE_TOOLS", Path.home() / ".cache" / "mongoprobe"))


def ferretdb_binary() -> Path:
    return Path(os.environ.get("MONGOPROBE_FERRETDB",
                               tools_dir() / f"ferretdb-{FERRETDB_VERSION}" / "ferretdb"))


def default_state_dir() -> Path:
    return Path(os.environ.get("MONGOPROBE_TARGET_DIR", f"/tmp/mongoprobe-{os.getuid()}/target"))


def free_port() -> int:
    # Bind to port 0 and let the kernel choose; there is a small race until the
    # server binds it, which start() survives by checking the port answers.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class TargetInfo:
    pid: int
    uri: str
    metrics_url: str
    port: int
    debug_port: int
    state_dir: str
    binary: str
    version: str
    tls: bool = False
    ca_file: str | None = None
    group: int | None = None      # the process group stop() ends (a wrapper's), if not pid
    backend: str = "sqlite"
    backend_pid: int | None = None   # PostgreSQL's postmaster (backend "postgresql")
    backend_group: int | None = None  # its wrapper's process group, if it has one

    def json(self) -> str:
        return json.dumps(asdict(self))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def status(state_dir: Path | None = None) -> TargetInfo | None:
    """The running target of this state directory, or None."""
    path = (state_dir or default_state_dir()) / "target.json"
    try:
        info = TargetInfo(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return info if _alive(info.pid) else None


def postgres_bin() -> Path:
    """The newest Debian PostgreSQL's bin folder (``postgresql`` package)."""
    root = Path("/usr/lib/postgresql")
    versions = sorted((p for p in root.glob("*/bin/postgres")),
                      key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit()
                      else 0)
    if not versions:
        raise TargetError("PostgreSQL is not installed (apt-get install postgresql)")
    return versions[-1].parent


def _start_postgres(pg: Path, fresh: bool, timeout: float,
                    wrapper: list[str] | None = None) -> tuple[int, int, int]:
    """A private PostgreSQL cluster in ``pg``, run as the ``postgres`` user (it refuses
    root), under ``wrapper`` if given: (postmaster pid, its process group, port)."""
    import pwd

    bin_ = postgres_bin()
    try:
        user = pwd.getpwnam("postgres")
    except KeyError:
        raise TargetError("no postgres user (apt-get install postgresql)") from None
    as_pg = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}
    if fresh and pg.exists():
        shutil.rmtree(pg)
    # the postgres user must reach its folder through the state directory
    for d in [pg.parent, *pg.parent.parents]:
        if d == Path("/"):
            break
        os.chmod(d, os.stat(d).st_mode | 0o011)
    if not (pg / "PG_VERSION").exists():
        pg.mkdir(parents=True, exist_ok=True)
        os.chown(pg, user.pw_uid, user.pw_gid)
        r = subprocess.run([str(bin_ / "initdb"), "-D", str(pg), "-U", "postgres",
                            "--auth=trust", "--no-sync"], capture_output=True, text=True,
                           cwd="/", **as_pg)
        if r.returncode:
            raise TargetError(f"initdb failed: {r.stderr.strip().splitlines()[-1:]}")
    port = free_port()
    log = open(pg.parent / "postgres.log", "ab")
    proc = subprocess.Popen([*(wrapper or []), str(bin_ / "postgres"), "-D", str(pg),
                             "-p", str(port), "-k", str(pg), "-c",
                             "listen_addresses=127.0.0.1"],
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log, cwd="/",
                            start_new_session=True, **as_pg)
    log.close()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TargetError(f"postgres exited with status {proc.returncode} during start "
                              f"(see {pg.parent / 'postgres.log'})")
        r = subprocess.run([str(bin_ / "pg_isready"), "-h", "127.0.0.1", "-p", str(port)],
                           capture_output=True)
        if r.returncode == 0:
            return (_wrapped(proc.pid, bin_ / "postgres") if wrapper else proc.pid,
                    proc.pid, port)
        time.sleep(0.2)
    _kill(proc.pid)
    raise TargetError(f"postgres did not answer on port {port} within {timeout:.0f}s")


def _wrapped(parent: int, binary: Path) -> int:
    """The FerretDB process a wrapper started (its descendant running ``binary``)."""
    from mongoprobe.run.treestat import tree_of
    for pid in tree_of(parent):
        try:
            if os.readlink(f"/proc/{pid}/exe") == str(binary.resolve()):
                return pid
        except OSError:
            continue
    raise TargetError(f"no {binary.name} process under the wrapper (pid {parent})")


def _wait_ready(proc: subprocess.Popen, port: int, metrics_url: str, timeout: float,
                host: str = "127.0.0.1") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise TargetError(f"ferretdb exited with status {proc.returncode} during start")
        try:
            with socket.create_connection((host, port), timeout=0.5):
                pass
            with urllib.request.urlopen(metrics_url, timeout=1) as r:
                r.read()
            return
        except OSError:
            time.sleep(0.1)
    raise TargetError(f"ferretdb did not answer on port {port} within {timeout:.0f}s")


def _self_signed(d: Path) -> tuple[Path, Path]:
    """(cert, key) for 127.0.0.1, valid a week: the certificate is its own CA."""
    d.mkdir(parents=True, exist_ok=True)
    cert, key = d / "cert.pem", d / "key.pem"
    try:
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", str(key), "-out", str(cert), "-days", "7",
                        "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise TargetError("openssl not found: it makes the TLS target's certificate")
    except subprocess.CalledProcessError as e:
        raise TargetError(f"openssl could not make a certificate: {e.stderr.strip()}")
    return cert, key


def start(state_dir: Path | None = None, port: int | None = None, fresh: bool = True,
          timeout: float = 30.0, tls: bool = False, host: str = "127.0.0.1",
          wrapper: list[str] | None = None, backend: str = "sqlite",
          backend_wrapper: list[str] | None = None) -> TargetInfo:
    """Start FerretDB on a free loopback port; return its pid, URI and metrics URL.
    ``tls``: serve TLS only, with a self-signed certificate made now. ``host``: the
    address it listens on (one of this host's, e.g. a veth's for a shaped path).
    ``wrapper``: a command FerretDB runs under (``strace -f ... --``, to inject
    faults); the pid returned is FerretDB's own, the wrapper's group is stopped.
    ``backend``: ``sqlite`` or ``postgresql`` (a private PostgreSQL, started here);
    ``backend_wrapper``: a command its postmaster runs under (as ``wrapper``)."""
    state_dir = state_dir or default_state_dir()
    running = status(state_dir)
    if running:
        if running.tls != tls:
            raise TargetError(f"a target {'with' if running.tls else 'without'} TLS is "
                              f"running (pid {running.pid}): stop it first")
        return running
    binary = ferretdb_binary()
    if not os.access(binary, os.X_OK):
        raise TargetError(f"{binary} not found: run scripts/setup.sh first")
    if backend not in ("sqlite", "postgresql"):
        raise TargetError(f"unknown backend {backend!r} (sqlite or postgresql)")
    data = state_dir / "data"
    if fresh and data.exists():
        shutil.rmtree(data)
    data.mkdir(parents=True, exist_ok=True)
    pg_pid = pg_group = None
    store = [f"--handler=sqlite", f"--sqlite-url=file:{data}/"]
    if backend == "postgresql":
        pg_pid, pg_group, pg_port = _start_postgres(state_dir / "pg", fresh, timeout,
                                                    backend_wrapper)
        store = ["--handler=postgresql",
                 f"--postgresql-url=postgres://postgres@127.0.0.1:{pg_port}/postgres"]
    port = port or free_port()
    debug_port = free_port()
    listen = [f"--listen-addr={host}:{port}"]
    ca_file = None
    if tls:
        cert, key = _self_signed(state_dir / "tls")
        ca_file = str(cert)
        listen = ["--listen-addr=", f"--listen-tls=127.0.0.1:{port}",
                  f"--listen-tls-cert-file={cert}", f"--listen-tls-key-file={key}"]
    log = open(state_dir / "ferretdb.log", "ab")
    proc = subprocess.Popen(
        [*(wrapper or []), str(binary), *store, *listen,
         f"--debug-addr=127.0.0.1:{debug_port}",
         f"--state-dir={state_dir}", "--telemetry=disable", "--log-level=warn"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True)  # survives the starting CLI; stop() kills the group
    log.close()
    metrics_url = f"http://127.0.0.1:{debug_port}/debug/metrics"
    try:
        _wait_ready(proc, port, metrics_url, timeout, host)
        pid = _wrapped(proc.pid, binary) if wrapper else proc.pid
    except TargetError:
        _kill(proc.pid)
        if pg_group:
            _kill(pg_group)
        raise
    uri = f"mongodb://{host}:{port}/"
    if tls:
        uri += "?" + urllib.parse.urlencode({"tls": "true", "tlsCAFile": ca_file})
    info = TargetInfo(pid=pid, uri=uri, metrics_url=metrics_url, port=port,
                      debug_port=debug_port, state_dir=str(state_dir), binary=str(binary),
                      version=FERRETDB_VERSION, tls=tls, ca_file=ca_file,
                      group=proc.pid if wrapper else None, backend=backend,
                      backend_pid=pg_pid,
                      backend_group=pg_group if pg_group != pg_pid else None)
    (state_dir / "target.json").write_text(info.json() + "\n")
    return info


def _kill(pid: int, timeout: float = 10.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                # Reap it if it is our child; otherwise just poll.
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                if not _alive(pid):
                    return
            time.sleep(0.05)


def stop(state_dir: Path | None = None) -> bool:
    """Stop the target; True if one was running. Leaves no process behind."""
    state_dir = state_dir or default_state_dir()
    info = status(state_dir)
    if info:
        _kill(info.group or info.pid)
        if info.backend_pid:
            # after FerretDB: no client keeps it waiting
            _kill(info.backend_group or info.backend_pid)
    (state_dir / "target.json").unlink(missing_ok=True)
    return info is not None


class EmbeddedTarget:
    """Context manager: a private FerretDB for a test or a recorded run."""

    def __init__(self, state_dir: Path):
        self.state_dir = Path(state_dir)
        self.info: TargetInfo | None = None

    def __enter__(self) -> TargetInfo:
        self.info = start(self.state_dir)
        return self.info

    def __exit__(self, *exc) -> None:
        stop(self.state_dir)


def request_counts(metrics_url: str) -> dict[tuple[str, str], int]:
    """FerretDB's own count of requests by (opcode, command), from /debug/metrics."""
    from mongoprobe.formats.prometheus import parse_prometheus

    with urllib.request.urlopen(metrics_url, timeout=5) as r:
        df = parse_prometheus(r.read().decode())
    rows = df[df["name"] == "ferretdb_client_requests_total"]
    return {(labels.get("opcode", ""), labels.get("command", "")): int(v)
            for labels, v in zip(rows["labels"], rows["value"])}
