"""mongoprobe record: run a load command while probes and collectors watch the server.

USAGE: mongoprobe record (-p PID | --target embedded) -o RUN [--probes LIST]
                         [--interval SEC] [--uri URI] [--metrics-url URL] -- COMMAND...

1. With ``--target embedded``, start a private FerretDB (state in a temporary
   directory, removed afterwards; its log is kept as RUN/target.log).
2. Note FerretDB's request counts (when its metrics URL is known), then start the
   probes and collectors of LIST (collectors.py; default ``latency``) side by side
   and wait until each is attached. One that is missing or fails is noted in the
   manifest and the run goes on without it.
3. Run COMMAND with ``MONGOPROBE_URI`` (the target's URI) and ``MONGOPROBE_RUN`` in
   its environment; keep its stdout and stderr, each line stamped with the wall
   time it arrived (RUN/load.out), and show them as they come.
4. The run ends when COMMAND exits, or on Ctrl-C / SIGTERM (COMMAND gets SIGINT,
   then SIGTERM/SIGKILL if it lingers; a second Ctrl-C kills it), or when the target
   pid exits (COMMAND gets SIGINT). A collector that dies meanwhile is noted with
   the time; the others go on.
5. Stop the collectors with SIGINT so the probes print their maps, note FerretDB's
   counts again, stop the embedded target, and complete RUN/manifest.json
   (rundir.py documents the layout and every key).

Exit status: 0 when the run was recorded (also when it was ended by Ctrl-C or by
the target exiting); COMMAND's status when it failed by itself; 1 (one line on
stderr) when nothing could be recorded (no such pid, RUN not empty, target failed).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from mongoprobe.model.clock import Clock
from mongoprobe.run import collectors, map_memory as mapmem, tracer as probes, wire_probe

LOAD_OUT, LOAD_STDOUT = "load.out", "load.stdout"   # as rundir.py documents them
ECHO_MAX = 400   # longer lines of the command are shown cut (they stay whole in load.out)


class RecordError(RuntimeError):
    """Nothing could be recorded: the message says why, in one line."""


# --- facts for the manifest ----------------------------------------------------------


def _first_line(argv: list[str]) -> str | None:
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=20,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    out = (r.stdout or r.stderr).strip()
    return out.splitlines()[0].strip() if out else None


def _dist(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def tool_versions(target_exe: str | None = None, target_version: str | None = None) -> dict:
    from mongoprobe import __version__
    from mongoprobe.run import tracer as probes

    v = {
        "bpftrace": (_first_line([probes.bpftrace_binary(), "--version"])
                     if shutil.which(probes.bpftrace_binary()) else None),
        # "Oracle D 2.0 (dtrace-utils 8a1264bf)" for the one setup builds (--engine dtrace)
        "bcc": probes.bcc_version(),
        "dtrace": probes.dtrace_version(),
        "perf": _first_line(["perf", "--version"]) if shutil.which("perf") else None,
        "tshark": _first_line(["tshark", "--version"]) if shutil.which("tshark") else None,
        "vmstat": _first_line(["vmstat", "-V"]) if shutil.which("vmstat") else None,
        "sysstat": _first_line(["iostat", "-V"]) if shutil.which("iostat") else None,
        "python": sys.version.split()[0],
        "pandas": _dist("pandas"),
        "pymongo": _dist("pymongo"),
        "mongoprobe": __version__,
        "ferretdb": target_version,
    }
    if target_version is None and target_exe and Path(target_exe).name in ("ferretdb",
                                                                             "mongod"):
        line = _first_line([target_exe, "--version"])
        if line:
            v["ferretdb" if Path(target_exe).name == "ferretdb" else "mongod"] = \
                line.replace("version:", "").replace("db version", "").strip()
    return v


def host_facts() -> tuple[dict, dict]:
    u = os.uname()
    model = mem = osname = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    total = probes.meminfo("MemTotal")
    mem = total // 1024 if total is not None else None
    try:
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    host = {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "cpu_model": model,
            "mem_total_kb": mem, "os": osname}
    kernel = {"release": u.release, "version": u.version, "machine": u.machine,
              "platform": platform.platform()}
    return host, kernel


def describe_pid(pid: int) -> dict:
    d: dict = {"pid": pid, "exe": None, "cmdline": None, "comm": None}
    try:
        d["exe"] = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        d["cmdline"] = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    except OSError:
        pass
    try:
        d["comm"] = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        pass
    return d


def listen_port(pid: int) -> int | None:
    """The first TCP port pid listens on (for pcap with -p PID)."""
    from mongoprobe.run import procnet

    try:
        peers = procnet.socket_peers(pid)
    except OSError:
        return None
    ports = sorted(local[1] for local, remote in peers.values() if remote[1] == 0)
    return ports[0] if ports else None


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def fetch_metrics(url: str, save: Path) -> list[dict] | None:
    """FerretDB's request counts; the raw text is saved beside the manifest."""
    from mongoprobe.formats.prometheus import parse_prometheus

    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return None
    save.write_text(text)
    df = parse_prometheus(text)
    rows = df[df["name"] == "ferretdb_client_requests_total"]
    return [{"opcode": lb.get("opcode", ""), "command": lb.get("command", ""), "count": int(v)}
            for lb, v in zip(rows["labels"], rows["value"])]


# --- the command ---------------------------------------------------------------------


class Command:
    """The load command: its output stamped per line into load.out, and shown."""

    def __init__(self, argv: list[str], env: dict, run_dir: Path, echo: bool = True):
        self.argv, self.run_dir, self.echo = argv, run_dir, echo
        self.lock = threading.Lock()
        self.out = open(run_dir / LOAD_OUT, "w")
        self.raw = open(run_dir / LOAD_STDOUT, "w")
        self.start = round(time.time(), 6)
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env={**os.environ, **env},
                                     start_new_session=True)
        self.pumps = [threading.Thread(target=self._pump, args=(self.proc.stdout, "stdout"),
                                       daemon=True),
                      threading.Thread(target=self._pump, args=(self.proc.stderr, "stderr"),
                                       daemon=True)]
        for t in self.pumps:
            t.start()

    def _pump(self, stream, name: str) -> None:
        show = sys.stdout if name == "stdout" else sys.stderr
        for raw in iter(stream.readline, b""):
            t = time.time()
            text = raw.decode(errors="replace").rstrip("\r\n")
            with self.lock:
                self.out.write(f"{t:.6f}\t{name}\t{text}\n")
                self.out.flush()
                if name == "stdout":
                    self.raw.write(text + "\n")
                    self.raw.flush()
            if self.echo:
                if len(text) > ECHO_MAX:   # the load's JSON summary: in load.out only
                    text = f"{text[:72]}... ({len(text):,} characters, kept in {LOAD_OUT})"
                try:
                    show.write(text + "\n")
                    show.flush()
                except (OSError, ValueError):
                    self.echo = False

    def signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def finish(self) -> None:
        for t in self.pumps:
            t.join(10)
        with self.lock:
            self.out.close()
            self.raw.close()


# --- recording -----------------------------------------------------------------------


def _say(msg: str) -> None:
    print(f"mongoprobe record: {msg}", file=sys.stderr, flush=True)


class Recorder:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.run_dir = Path(args.output)
        self.manifest: dict = {}
        self.notes: list[dict] = []
        self.signals = 0
        self.target_info = None
        self.state_dir: Path | None = None

    def note(self, what: str, quiet: bool = False) -> None:
        self.notes.append({"time": round(time.time(), 6), "what": what})
        if not quiet:
            _say(what)

    def _on_signal(self, signum, frame) -> None:
        self.signals += 1

    def prepare(self) -> None:
        d = self.run_dir
        if d.exists() and (not d.is_dir() or any(d.iterdir())):
            raise RecordError(f"{d} exists and is not an empty directory")
        if self.args.pid is not None and not alive(self.args.pid):
            raise RecordError(f"no process with pid {self.args.pid}")
        d.mkdir(parents=True, exist_ok=True)

    def start_target(self) -> dict:
        a = self.args
        if a.target == "embedded":
            from mongoprobe.run import target

            self.state_dir = Path(tempfile.mkdtemp(prefix="mongoprobe-record-"))
            try:
                info = target.start(self.state_dir, backend=getattr(a, "backend", "sqlite"))
            except target.TargetError as e:
                shutil.rmtree(self.state_dir, ignore_errors=True)
                raise RecordError(f"embedded target: {e}")
            self.target_info = info
            t = describe_pid(info.pid)
            t.update(kind="embedded", uri=info.uri, metrics_url=info.metrics_url,
                     port=info.port, version=info.version,
                     backend=getattr(a, "backend", "sqlite"))
        else:
            t = describe_pid(a.pid)
            t.update(kind="pid", uri=a.uri, metrics_url=a.metrics_url,
                     port=a.port or listen_port(a.pid), version=None)
        t["exited_at"] = None
        return t

    def stop_target(self) -> None:
        if self.target_info is None:
            return
        from mongoprobe.run import target

        self.target_info = None
        target.stop(self.state_dir)
        log = self.state_dir / "ferretdb.log"
        if log.exists():
            shutil.copyfile(log, self.run_dir / "target.log")
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def save(self) -> None:
        self.manifest["notes"] = self.notes
        files = {"load_out": LOAD_OUT, "load_stdout": LOAD_STDOUT,
                 "metrics_before": "metrics.before.txt", "metrics_after": "metrics.after.txt",
                 "target_log": "target.log", "latency_events": "latency.events.parquet",
                 "treestat": "treestat.txt"}
        self.manifest["files"] = {k: v for k, v in files.items()
                                  if (self.run_dir / v).exists()}
        from mongoprobe.run.run_folder import write_manifest
        write_manifest(self.run_dir, self.manifest)

    def run(self) -> int:
        self.prepare()
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            return self._run()
        finally:
            for s, h in old.items():
                signal.signal(s, h)

    def _run(self) -> int:
        host, kernel = host_facts()
        clock0 = Clock.measure().as_dict()
        t = self.start_target()
        try:
            return self._record(t, host, kernel, clock0)
        finally:
            self.stop_target()

    def _record(self, t: dict, host: dict, kernel: dict, clock0: dict) -> int:
        a = self.args
        pid = t["pid"]
        m = self.manifest
        m.update({
            "format": "mongoprobe-run", "version": 1, "status": "running",
            "record_argv": ["mongoprobe", *a.record_argv],
            "command": {"argv": a.command, "pid": None, "env": {}, "start": None,
                        "end": None, "returncode": None},
            "ended_by": None,
            "start": round(clock0["realtime_ns"] / 1e9, 6), "end": None,
            "clock": {"start": clock0, "end": None, "drift_ns": None,
                      "note": "wall_ns = monotonic_ns + offset_ns"},
            "interval": a.interval,
            "host": host, "kernel": kernel,
            "tools": tool_versions(t.get("exe"), t.get("version")),
            "target": t,
            "probes_requested": a.probes,
            # what the run varies (record --label KEY=VALUE): compare's groups and columns
            "labels": dict(getattr(a, "label", None) or []),
            "collectors": {},
            "metrics": {"url": t.get("metrics_url"), "before": None, "after": None},
        })
        if t.get("metrics_url"):
            m["metrics"]["before"] = fetch_metrics(t["metrics_url"],
                                                   self.run_dir / "metrics.before.txt")
        every = (a.events_sample or 1) if a.events else 0
        m["latency_events_every"] = every
        # the latency probe's engine (--engine auto: bcc where it compiles, else
        # bpftrace; engines.py) and why, and its sizing, computed before it loads
        asked = getattr(a, "tls", "auto")
        engine, hook, notes = "bpftrace", None, []
        conns = getattr(a, "max_connections", None)
        if "latency" in a.probes:
            engine, why = self.latency_engine(pid, asked)
            m["latency_engine"] = {"engine": engine, "why": why}
            if engine == "bpftrace":
                # --tls: the OpenSSL the bpftrace latency probe hooks
                # (mongo_latency_tls.bt; Go's crypto/tls is bcc's only)
                try:
                    hook, notes = wire_probe.bpftrace_tls_hook(pid, asked)
                except probes.ProbeError as e:
                    raise RecordError(str(e)) from None
                if hook is not None:
                    for note in notes:
                        _say(note)
            script = ("mongolatency.py" if engine == "bcc" else
                      "mongo_latency_tls.bt" if hook else "mongo_latency.bt")
            cpus = probes.possible_cpus()
            lowered = conns is None and mapmem.default_connections(
                engine, script, cpus, bool(every)) < probes.MAX_CONNECTIONS
            conns = conns or mapmem.default_connections(engine, script, cpus, bool(every))
            estimate = mapmem.wire_bytes(engine, script, conns, cpus, bool(every))
            too_much = mapmem.too_much(estimate)
            if too_much:
                raise RecordError(f"{script}: maps sized for {conns} connections would pin "
                                  f"{too_much}: lower --max-connections")
            m["latency_sizing"] = {"script": script, "max_connections": conns,
                                   "default_lowered": lowered,
                                   "cpus": cpus, "map_bytes_computed": estimate}
        # (why a library was not hooked stays here: said aloud only if TLS connections
        # are seen, by the probe's untraced line); bcc hooks what it finds itself and
        # says it on its stderr (filled in once it is attached)
        m["latency_tls"] = {"asked": asked,
                            "decoded": None if engine == "bcc" else hook is not None,
                            "library": hook.shown if hook else None, "notes": notes}
        ctx = collectors.Context(pid=pid, run_dir=self.run_dir, interval=a.interval,
                                 port=t.get("port"), events_every=every,
                                 max_connections=conns or collectors.MAX_CONNECTIONS,
                                 tls_library=hook.path if hook else None,
                                 engine=engine, tls=asked)
        _say(f"starting {', '.join(a.probes)} on pid {pid} ...")
        cols = collectors.start_all(a.probes, ctx)
        for c in cols:
            m["collectors"][c.name] = c.info
            st = c.info["status"]
            if st == "running":
                self.note(f"{c.name}: running" + (f" ({c.info['note']})" if c.info["note"]
                                                  else ""), quiet=True)
                if c.name == "latency":
                    sz = m["latency_sizing"]
                    self.note(wire_probe.sizing_line(
                        sz["script"], sz["max_connections"], sz["default_lowered"],
                        sz["cpus"], sz["map_bytes_computed"], c.info.get("map_bytes")))
                if c.name == "latency" and engine == "bcc":
                    said = wire_probe.said_about_tls(c.stderr_lines())
                    m["latency_tls"].update(
                        decoded=any("TLS plaintext from" in ln for ln in said), notes=said)
                    for line in said:
                        _say(line)
            else:
                self.note(f"{c.name}: {st}: {c.info['note'] or c.info['error']}")
        self.save()
        bad = [c for c in cols if c.info.get("sizing_error")]
        if bad:     # maps of another size than asked fill silently: not a run to keep
            collectors.stop_all(cols)
            raise RecordError(bad[0].info["error"])

        ended_by = "command"
        cmd = None
        rc = None
        if self.signals:
            ended_by = "interrupt"
            self.note("interrupted before the command started")
        elif not alive(pid):
            ended_by = "target_exit"
            t["exited_at"] = round(time.time(), 6)
            self.note(f"target pid {pid} exited before the command started")
        else:
            env = {"MONGOPROBE_RUN": str(self.run_dir.resolve()), "PYTHONUNBUFFERED": "1"}
            if t.get("uri"):
                env["MONGOPROBE_URI"] = t["uri"]
            m["command"]["env"] = env
            _say(f"recording to {self.run_dir}; running: {' '.join(a.command)}")
            argv = list(a.command)
            if argv[0] == "mongoprobe" and shutil.which("mongoprobe") is None:
                # Not on PATH (virtualenv not activated): this very mongoprobe.
                argv[:1] = [sys.executable, "-m", "mongoprobe"]
                self.note(f"mongoprobe is not on PATH: running {' '.join(argv[:3])}",
                          quiet=True)
            m["command"]["argv"] = argv
            try:
                cmd = Command(argv, env, self.run_dir)
            except OSError as e:
                self.note(f"command could not start: {e.strerror}: {argv[0]}")
                rc = 127
                m["command"]["returncode"] = rc
            if cmd is not None:
                m["command"].update(pid=cmd.proc.pid, start=cmd.start)
                self.save()
                # the server's and the tool's CPU and run-queue time, per second (the
                # verdict's USE figures: treestat.py)
                from mongoprobe.run.treestat import Sampler
                tree = Sampler(self.run_dir / "treestat.txt", pid, cmd.proc.pid, a.interval)
                tree.start()
                try:
                    rc, ended_by = self._watch(cmd, cols, pid, t)
                finally:
                    tree.stop()
                cmd.finish()
                m["command"].update(end=round(time.time(), 6), returncode=rc)

        # Let the probes see the last replies, then stop them so they print.
        if alive(pid):
            time.sleep(0.3)
        for c in cols:      # ended since the last look?
            note = c.check(target_gone=t.get("exited_at") is not None)
            if note:
                self.note(f"{note}: {c.info['error'] or c.info['note']}")
        collectors.stop_all(cols)
        if every and "latency" in m["collectors"]:
            to_parquet = (collectors.bcc_events_to_parquet if engine == "bcc"
                          else collectors.events_to_parquet)
            to_parquet(self.run_dir, m["clock"]["start"]["offset_ns"], pid)
        for c in cols:
            out = self.run_dir / c.info["output"] if c.info.get("output") else None
            if c.name == "latency" and out is not None and out.exists():
                c.info["output"] = collectors.compress(out).name
        for c in cols:
            if c.info["status"] == "died":
                continue
            if c.info["status"] == "stopped" and c.info["returncode"] not in (0, None, -2, 130):
                c.info["note"] = " ".join(filter(None, [
                    c.info["note"], f"exit status {c.info['returncode']}: {c.error_line()}"]))
        if t.get("metrics_url") and alive(pid):
            m["metrics"]["after"] = fetch_metrics(t["metrics_url"],
                                                  self.run_dir / "metrics.after.txt")
        self.stop_target()
        clock1 = Clock.measure().as_dict()
        m["clock"]["end"] = clock1
        m["clock"]["drift_ns"] = clock1["offset_ns"] - m["clock"]["start"]["offset_ns"]
        m["end"] = round(clock1["realtime_ns"] / 1e9, 6)
        m["ended_by"] = ended_by
        m["status"] = "complete"
        self.save()
        died = [c.name for c in cols if c.info["status"] == "died"]
        _say(f"run recorded in {self.run_dir} (ended by {ended_by}"
             + (f"; died: {', '.join(died)}" if died else "") + ")")
        self.say_losses()
        if ended_by == "command" and rc not in (0, None):
            return rc if rc > 0 else 128 - rc
        return 0

    def latency_engine(self, pid: int, tls: str) -> tuple[str, str]:
        """(engine, why) of the latency probe: --engine as asked, or auto's choice of
        the engines record runs (bcc, bpftrace), said on stderr."""
        from mongoprobe.run import engine_choice as engines
        asked = getattr(self.args, "engine", "auto")
        if asked != "auto":
            return asked, "asked (--engine)"
        try:
            choice = engines.choose(pid, tls, ("bcc", "bpftrace"))
        except probes.ProbeError as e:
            raise RecordError(str(e)) from None
        _say(choice.why)
        return choice.engine, choice.why

    def say_losses(self) -> None:
        """The run's losses as ``phases`` and ``report`` show them: the probe's
        counters, the stacks not folded, the collectors that died."""
        from mongoprobe.formats.errors import FormatError
        from mongoprobe.run.run_folder import load_run, lost_line

        try:
            lost = load_run(self.run_dir).lost
        except FormatError as e:        # a damaged probe output: phases will say so too
            _say(f"losses not read: {e}")
            return
        for line in lost_line(lost).splitlines():
            _say(line)

    def _watch(self, cmd: Command, cols: list, pid: int, t: dict) -> tuple[int, str]:
        """Until the command ends; returns (its exit status, what ended the run)."""
        ended_by = "command"
        handled = 0
        asked_at = None
        escalated = 0
        while True:
            rc = cmd.wait(0.2)
            gone = t.get("exited_at") is None and not alive(pid)
            if gone:
                t["exited_at"] = round(time.time(), 6)
            if rc is not None:
                if gone:
                    self.note(f"target pid {pid} exited")
                    if rc != 0 and ended_by == "command":
                        ended_by = "target_exit"
                return rc, ended_by
            if gone and ended_by == "command":
                ended_by = "target_exit"
                self.note(f"target pid {pid} exited: stopping the command (SIGINT)")
                cmd.signal(signal.SIGINT)
                asked_at = time.monotonic()
                self.save()
            for c in cols:
                note = c.check(target_gone=t.get("exited_at") is not None)
                if note:
                    self.note(f"{note}: {c.info['error'] or c.info['note']}")
                    self.save()
            if self.signals > handled:
                handled = self.signals
                if asked_at is None:
                    ended_by = "interrupt"
                    self.note("interrupted: stopping the command (SIGINT)")
                    cmd.signal(signal.SIGINT)
                    asked_at = time.monotonic()
                else:
                    self.note("interrupted again: killing the command")
                    cmd.signal(signal.SIGKILL)
            if asked_at is not None:
                waited = time.monotonic() - asked_at
                if waited > self.args.grace and escalated == 0:
                    self.note(f"command still running {self.args.grace:.0f}s after SIGINT: "
                              "SIGTERM")
                    cmd.signal(signal.SIGTERM)
                    escalated = 1
                elif waited > self.args.grace + 5 and escalated == 1:
                    self.note("command still running: SIGKILL")
                    cmd.signal(signal.SIGKILL)
                    escalated = 2
