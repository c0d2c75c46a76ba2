"""``mongoprobe profile``, ``flush``, ``syscount``, ``threads``: where a server's time goes.

One ``cmd_<name>(args)`` per subcommand; ``register(subparsers)`` adds them to the
``mongoprobe`` parser. Each runs a probe from ``probes/`` (or
``perf``) as a child process on one pid, stops it after ``-d SEC``, at Ctrl-C or when
the pid exits, and prints data on stdout, diagnostics (banner, losses) on stderr.
Missing pid, missing thread, no root, no tracer: one line and exit status 1.

profile   probes/profile.bt (or offcpu.bt) in bpftrace's text, or ``perf record -g``
          + ``perf script``; raw stacks to ``-o FILE.bt.txt`` / ``FILE.perf.txt``;
          ``.folded`` / ``.svg`` are made from them as ``mongoprobe fold`` and
          ``mongoprobe flamegraph`` make them (``cli/stacks.py``).
flush     probes/flush.bt: latency histograms per flush syscall, bytes, threads,
          files and the user stacks that flush.
syscount  probes/syscount.bt: calls, time and errors per syscall, named.
threads   probes/threads.bt: the ``prstat -mL`` view, one table per interval.

``--engine dtrace`` runs the D twins instead (dtrace/profile.d, flush.d, syscount.d --
syscount_linux.d on Linux;
mongoprobe.run.dtrace_runner): the same parsers read their output, DTrace's own losses
(from its stderr) are reported on the ``lost:`` line.

The probes' own output is parsed by ``formats/flush_output.py``,
``formats/syscount_output.py``, ``formats/threads_output.py`` (with
``mongoprobe.analysis.thread_states``) and ``formats/bpftrace_stacks.py``/``dtrace_stacks.py`` (the
profile's tally); ``mongoprobe.views.text`` renders the tables.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from mongoprobe.run import tracer as probes   # stdlib only: cheap at start-up
from .common import RAW, CommandError, check_trace, run_dtrace

PROFILE_EXAMPLES = """examples:
  mongoprobe profile -p 4127 -d 30 -o cpu.bt.txt        # bpftrace, 99 Hz, raw stacks
  mongoprobe profile -p 4127 -d 30 -o cpu.perf.txt      # perf record -g, perf script
  mongoprobe profile -p 4127 -F 997 --tid 4133 -d 10 -o t.bt.txt   # one thread
  mongoprobe profile -p 4127 --offcpu -d 10 -o off.bt.txt  # off-CPU time (us) by stack
  mongoprobe profile -p 4127 --engine perf --call-graph dwarf -d 10 -o c.perf.txt
  mongoprobe profile -p 4127 -d 30 -o cpu.svg           # flame graph (mongoprobe.model.stack_samples)
  mongoprobe profile -p 4127 --engine dtrace -d 30 -o cpu.svg   # dtrace/profile.d
"""
FLUSH_EXAMPLES = """examples:
  mongoprobe flush -p 4127                # until Ctrl-C: msync/fsync/... histograms
  mongoprobe flush -p 4127 -d 60 --json   # {"flushes", "threads", "fds", "stacks"...}
  mongoprobe flush -p 4127 --engine dtrace -d 60   # dtrace/flush.d
"""
SYSCOUNT_EXAMPLES = """examples:
  mongoprobe syscount -p 4127 -d 10       # calls and time per syscall, most called first
  mongoprobe syscount -p 4127 -d 10 --sort time -n 15
  mongoprobe syscount -p 4127 -d 10 --json
  mongoprobe syscount -p 4127 --engine dtrace -d 10   # dtrace/syscount_linux.d
"""
THREADS_EXAMPLES = """examples:
  mongoprobe threads -p 4127              # every second until Ctrl-C (prstat -mL)
  mongoprobe threads -p 4127 -i 5 -d 60   # every 5 s for a minute
  mongoprobe threads -p 4127 -d 10 --json # one JSON object per interval
"""

# dtrace/syscount_linux.d is the D twin of syscount.bt on Linux
_LINUX = sys.platform.startswith("linux")
RAW_SUFFIX = {"bpftrace": ".bt.txt", "perf": ".perf.txt", "dtrace": ".dtrace.txt"}
STACK_SUFFIXES = (".folded", ".svg")


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- checks and running ---------------------------------------------------------------


def _bpftrace_env(keys_max: int | None = None) -> dict:
    from mongoprobe.run.collectors import PROFILER_ENV        # (not the wire probes' short strings)
    env = dict(PROFILER_ENV)
    if keys_max:
        env.update(probes.bpftrace_map_keys(keys_max))
    return env


def _start_bpftrace(script: str | Path, argv: list, keys_max: int | None = None,
                    json_mode: bool = False):
    try:
        path = Path(script) if os.path.isabs(str(script)) else probes.probe_path(str(script))
        cmd = [probes.bpftrace_binary()] + (["-f", "json"] if json_mode else []) + [str(path),
                                                                     *map(str, argv)]
        return probes.Probe(cmd, ready="Hit Ctrl-C", env=_bpftrace_env(keys_max))
    except probes.ProbeError as e:
        raise CommandError(str(e)) from None


def _stack_errors(probe) -> int:
    from ..formats.bpftrace_stacks import lookup_failures
    return lookup_failures(probe.stderr_lines)


# --- profile ---------------------------------------------------------------------------


def _keys_max(hz: int, duration: float | None) -> int:
    """Room for every sample as its own key (they nearly all are) and a stack map
    sparse enough that few stacks collide: hz x CPUs x seconds x 8, as a power of two
    in [16384, 131072] (300 s without -d). The stack map gets the same number of 1 KiB
    entries, so 131072 locks about 130 MB while it runs. (At x4, a 30 s profile of
    FerretDB lost 17 of 2448 samples' user stacks to collisions.)"""
    cpus = os.cpu_count() or 1
    need = 8 * hz * cpus * (duration if duration else 300)
    n = 16384
    while n < need and n < 131072:
        n *= 2
    return n


def _profile_script(hz: int, workdir: Path) -> Path:
    """probes/profile.bt at ``hz`` (its frequency is a literal: bpftrace 0.17 has no
    default for a positional parameter in an attach point)."""

    src = probes.probe_path("profile.bt")
    if hz == 99:
        return src
    text = src.read_text()
    text = (text.replace("profile:hz:99", f"profile:hz:{hz}")
            .replace("hz=99", f"hz={hz}").replace("at 99 Hertz", f"at {hz} Hertz"))
    out = workdir / "profile.bt"
    out.write_text(text)
    return out


def _perf_event() -> str:
    """``cycles`` when the CPU's counters sample here, else ``cpu-clock``."""
    try:
        r = subprocess.run(["perf", "stat", "-x,", "-e", "cycles", "true"],
                           capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return "cpu-clock"
    first = next((ln for ln in r.stderr.splitlines() if "cycles" in ln), "")
    return "cycles" if first[:1].isdigit() else "cpu-clock"


def _profile_paths(args: argparse.Namespace) -> tuple[str, Path, Path | None]:
    """(engine, raw stack file, converted file or None) from -o and --engine."""
    out = Path(args.output)
    name = out.name
    engine = args.engine
    if name.endswith(".perf.txt"):
        if engine == "bpftrace":
            raise CommandError(f"{out}: .perf.txt is perf script output; use .bt.txt with --engine bpftrace")
        return "perf", out, None
    if name.endswith(".dtrace.txt"):
        if engine not in (None, "dtrace"):
            raise CommandError(f"{out}: .dtrace.txt is profile.d output; use it with --engine dtrace")
        return "dtrace", out, None
    if engine == "dtrace" and not name.endswith(STACK_SUFFIXES):
        raise CommandError(f"{out}: with --engine dtrace the output name ends in .dtrace.txt, .folded or .svg")
    if name.endswith(".bt.txt"):
        if engine == "perf":
            raise CommandError(f"{out}: .bt.txt is bpftrace output; use .perf.txt with --engine perf")
        return "bpftrace", out, None
    if name.endswith(STACK_SUFFIXES):
        engine = engine or "bpftrace"
        raw = out.with_name(name[: -len(out.suffix)] + RAW_SUFFIX[engine])
        return engine, raw, out
    raise CommandError(f"{out}: the output name must end in .bt.txt, .perf.txt, .dtrace.txt, .folded or .svg")


def cmd_profile(args: argparse.Namespace) -> int:
    engine, raw, converted = _profile_paths(args)
    if args.frequency <= 0 or args.frequency > 10000:
        raise CommandError(f"-F {args.frequency}: the frequency must be 1..10000 Hz")
    if engine == "bpftrace" and args.call_graph == "dwarf":
        raise CommandError("bpftrace walks frame pointers only: use --engine perf for --call-graph dwarf")
    if engine in ("perf", "dtrace") and args.offcpu:
        raise CommandError("--offcpu needs --engine bpftrace (sched_switch stacks)")
    if engine == "dtrace" and args.call_graph == "dwarf":
        raise CommandError("dtrace's ustack() walks frame pointers: use --engine perf for --call-graph dwarf")
    check_trace(engine, args.pid, args.tid)
    raw.parent.mkdir(parents=True, exist_ok=True)
    if engine == "perf":
        rc = _profile_perf(args, raw)
    elif engine == "dtrace":
        rc = _profile_dtrace(args, raw)
    else:
        rc = _profile_bpftrace(args, raw)
    if rc == 0 and converted is not None:
        rc = _convert_stacks(raw, converted, engine, args)
    return rc


def _run_dtrace(script: str, args: argparse.Namespace, argv: tuple = (), banner: str = ""):
    return run_dtrace(script, args.pid, args.duration, lambda lines: bool(lines[3:]),
                      args=argv, banner=banner)


def _profile_dtrace(args: argparse.Namespace, raw: Path) -> int:
    """dtrace/profile.d at -F HZ (its rate is in the probe name: profile-97)."""
    from ..formats import dtrace_stacks

    tid = args.tid or 0
    with tempfile.TemporaryDirectory(prefix="mongoprobe-profile-") as tmp:
        script = probes.dtrace_dir() / "profile.d"
        if args.frequency != 97:
            text = script.read_text()
            script = Path(tmp) / "profile.d"
            script.write_text(text.replace("profile-97", f"profile-{args.frequency}")
                              .replace("hz=97", f"hz={args.frequency}")
                              .replace("at 97 Hertz", f"at {args.frequency} Hertz"))
        target = f"thread {tid} of PID {args.pid}" if tid else f"PID {args.pid}"
        run = _run_dtrace(str(script), args, (tid, 0), banner=(
            f"Sampling {target}: on-CPU stacks at {args.frequency} Hz (dtrace)... "
            "Hit Ctrl-C to end."))
    raw.write_text("".join(run.lines))
    stats: dict = {}
    with open(raw) as fh:
        samples = list(dtrace_stacks.read(fh, str(raw), stats))
    total = next((int(ln.split()[1]) for ln in run.lines
                  if ln.startswith("@samples_total:")), None)
    no_ustack = dtrace_stacks.no_ustack_weight(run.lines)
    _err(f"wrote {raw}: {stats.get('samples', 0)} samples in {stats.get('stacks', 0)} stacks, "
         f"{len({s[2] for s in samples})} threads, {len({s[0] for s in samples})} seconds")
    lost = []
    if total is not None and total > stats.get("samples", 0):
        lost.append(f"{total - stats['samples']} samples not printed (aggregation full: raise "
                    "-x aggsize)")
    lost.append(f"{no_ustack} samples without a user stack")
    lost.append(run.loss_line())
    _err("lost: " + ", ".join(lost))
    return 0


def _profile_bpftrace(args: argparse.Namespace, raw: Path) -> int:
    from ..formats import bpftrace_stacks

    tid = args.tid or 0
    with tempfile.TemporaryDirectory(prefix="mongoprobe-profile-") as tmp:
        if args.offcpu:
            script, what = "offcpu.bt", "off-CPU time (sched_switch)"
            keys = 65536
        else:
            script = _profile_script(args.frequency, Path(tmp))
            what = f"on-CPU stacks at {args.frequency} Hz"
            keys = _keys_max(args.frequency, args.duration)
        probe = _start_bpftrace(script, [args.pid, tid], keys_max=keys)
        stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None,
                                 args.duration, args.pid, child=probe.proc.pid)
        target = f"thread {tid} of PID {args.pid}" if tid else f"PID {args.pid}"
        _err(f"Sampling {target}: {what} (bpftrace)... Hit Ctrl-C to end.")
        with open(raw, "w") as fh:
            line = "\n"
            for line in probe.lines():
                fh.write(line)
            if not line.endswith("\n"):
                fh.write("\n")
        rc = probe.stop()
        ended = time.monotonic()
    if stopper.reason is None:
        _err(f"mongoprobe: bpftrace ended by itself: {probe.error_summary()}")
    elif stopper.reason.endswith("exited"):
        _err(f"mongoprobe: {stopper.reason} before bpftrace printed: its user stacks are "
             "hex addresses (bpftrace symbolises at print time; perf does not need the "
             "process: --engine perf)")
    tally = bpftrace_stacks.tally(raw.read_text().splitlines())
    lost_stacks = _stack_errors(probe)
    unit = "us off-CPU" if args.offcpu else "samples"
    printing = (f", printed in {ended - stopper.fired_at:.1f} s" if stopper.fired_at
                else "")
    _err(f"wrote {raw}: {tally['weight']} {unit} in {tally['entries']} stacks, "
         f"{tally['tids']} threads, {tally['seconds']} seconds{printing}")
    lost = []
    if not args.offcpu and tally["total"] is not None and tally["total"] > tally["weight"]:
        lost.append(f"{tally['total'] - tally['weight']} samples dropped (map full: raise "
                    "BPFTRACE_MAP_KEYS_MAX)")
    lost.append(f"{lost_stacks} stacks lost to stack-map collisions")
    lost.append(f"{tally['no_ustack']} {unit} without a user stack")
    _err("lost: " + ", ".join(lost))
    if tally["entries"] == 0 and rc not in (0, None):
        raise CommandError(f"bpftrace failed: {probe.error_summary()}")
    return 0


def _profile_perf(args: argparse.Namespace, raw: Path) -> int:
    event = args.event or _perf_event()
    with tempfile.TemporaryDirectory(prefix="mongoprobe-perf-") as tmp:
        data, ctl, ack = (Path(tmp) / n for n in ("perf.data", "ctl", "ack"))
        os.mkfifo(ctl)
        os.mkfifo(ack)
        cmd = ["perf", "record", "-F", str(args.frequency), "-e", event,
               *(["--call-graph", "dwarf"] if args.call_graph == "dwarf" else ["-g"]),
               *(["-t", str(args.tid)] if args.tid else ["-p", str(args.pid)]),
               "-o", str(data), "-D", "-1", f"--control=fifo:{ctl},{ack}"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
        err_lines: list[str] = []
        threading.Thread(target=lambda: err_lines.extend(proc.stderr), daemon=True).start()
        # Start disabled, enable through the control fifo: the ack says it is sampling.
        ctl_fd = os.open(ctl, os.O_RDWR)
        ack_fd = os.open(ack, os.O_RDWR)
        os.write(ctl_fd, b"enable\n")
        import select
        ready, _, _ = select.select([ack_fd], [], [], 30)
        if not ready:
            proc.kill()
            proc.wait()
            raise CommandError(f"perf record did not start: {''.join(err_lines).strip()[-200:]}")
        os.read(ack_fd, 16)

        def stop() -> None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

        stopper = probes.Stopper(stop, lambda: proc.poll() is None, args.duration, args.pid,
                                 child=proc.pid)
        target = f"thread {args.tid} of PID {args.pid}" if args.tid else f"PID {args.pid}"
        _err(f"Sampling {target}: {event} at {args.frequency} Hz, call graph "
             f"{args.call_graph} (perf record)... Hit Ctrl-C to end.")
        proc.wait()
        os.close(ctl_fd)
        os.close(ack_fd)
        if stopper.reason is None:
            stopper.reason = "perf exited"
        if not data.exists() or data.stat().st_size == 0:
            raise CommandError(f"perf record wrote nothing: {''.join(err_lines).strip()[-200:]}")
        with open(raw, "w") as fh:
            r = subprocess.run(["perf", "script", "-F", "+pid", "-i", str(data)],
                               stdout=fh, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise CommandError(f"perf script failed: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
    captured = next((re.search(r"\((\d+) samples\)", ln) for ln in err_lines
                     if "Captured and wrote" in ln), None)
    n = sum(1 for ln in raw.open() if ln[:1] not in ("", "\t", "\n", " ", "#"))
    said = f"perf record captured {captured[1]}" if captured else "perf record said nothing"
    _err(f"wrote {raw}: {n} samples ({said})")
    lost = [ln.strip() for ln in err_lines + r.stderr.splitlines()
            if re.search(r"lost|LOST|Processed .* samples and lost", ln)]
    _err("lost: " + ("; ".join(lost) if lost else "perf reported no lost events or chunks"))
    return 0


def _convert_stacks(raw: Path, out: Path, fmt: str, args: argparse.Namespace) -> int:
    """raw stacks -> ``.folded`` as ``mongoprobe fold`` writes it, or ``.svg`` as
    ``mongoprobe flamegraph`` draws it (``cli/stacks.py``, in this process)."""
    from . import stacks as stacks_cli

    try:
        if out.suffix == ".folded":
            with open(out, "w") as fh:
                stacks_cli.fold_to(str(raw), fmt, fh)
        else:
            what = "Off-CPU time" if args.offcpu else "CPU"
            thread = f" thread {args.tid}" if args.tid else ""
            stacks_cli.flamegraph_to(str(raw), fmt, out, title=f"{what}: PID {args.pid}"
                                     f"{thread} ({raw.name})", pid=str(args.pid))
    except CommandError as e:
        raise CommandError(f"{out}: {e} (raw stacks kept in {raw})") from None
    _err(f"wrote {out} (raw stacks: {raw})")
    return 0


# --- flush -----------------------------------------------------------------------------


def cmd_flush(args: argparse.Namespace) -> int:
    from ..formats.flush_output import parse_flush

    check_trace(args.engine, args.pid)
    if args.engine == "dtrace":
        return _flush_dtrace(args)
    probe = _start_bpftrace("flush.bt", [args.pid], json_mode=True)
    stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, args.duration,
                             args.pid, child=probe.proc.pid)
    _err(f"Tracing flushes of PID {args.pid} (msync fsync fdatasync sync_file_range "
         "syncfs)... Hit Ctrl-C to end.")
    lines = list(probe.lines())
    rc = probe.stop()
    try:
        res = parse_flush(lines, "flush.bt")
    except ValueError as e:
        raise CommandError(f"flush.bt output unreadable: {e}")
    if rc not in (0, None) and res.calls.empty and stopper.reason is None:
        raise CommandError(f"bpftrace failed: {probe.error_summary()}")
    lost = _stack_errors(probe)
    _print_flush(res, args, {"stacks": lost})
    _err(f"lost: {lost} stacks (stack-map collisions)")
    return 0


def _print_flush(res, args: argparse.Namespace, lost: dict) -> None:
    """flush's result, either engine's: JSON (fds with their paths) or the tables."""
    from mongoprobe.run import procnet
    from mongoprobe.views import text as views

    if args.json:
        j = res.to_json()
        j["pid"] = args.pid
        for f in j["fds"]:
            f["path"] = procnet.fd_path(args.pid, int(f["fd"]))
        j["lost"] = lost
        print(json.dumps(j))
    else:
        print(views.render_flush(res, args.pid), end="")


def _flush_dtrace(args: argparse.Namespace) -> int:
    """dtrace/flush.d: msync (memcntl MC_SYNC on illumos), fsync, fdatasync, and on Linux
    sync_file_range and syncfs; flush_output reads it as it reads flush.bt's."""
    from ..formats.flush_output import parse_flush

    run = _run_dtrace("flush.d", args, banner=f"Tracing flushes of PID {args.pid} (dtrace "
                      "flush.d)... Hit Ctrl-C to end.")
    try:
        res = parse_flush([ln.rstrip("\n") for ln in run.lines], "flush.d")
    except ValueError as e:
        raise CommandError(f"flush.d output unreadable: {e}")
    _print_flush(res, args, {"dropped": run.dropped})
    _err(f"lost: {run.loss_line()}")
    return 0


# --- syscount --------------------------------------------------------------------------


def cmd_syscount(args: argparse.Namespace) -> int:
    from mongoprobe.run import syscall_table as syscalls
    from mongoprobe.views import text as views
    from ..formats import syscount_output

    check_trace(args.engine, args.pid)
    lost_line = None
    if args.engine == "dtrace":
        # On Linux the raw_syscalls twin: the syscall provider's ~1,440 probes take DTrace
        # about a minute to attach and detach; numbers are named as for syscount.bt
        script = "syscount_linux.d" if _LINUX else "syscount.d"
        t0 = time.monotonic()
        run = _run_dtrace(script, args, banner=f"Counting syscalls of PID {args.pid} "
                          f"(dtrace {script})... Hit Ctrl-C to end.")
        seconds = time.monotonic() - t0
        try:
            df = syscount_output.parse_syscount(run.lines, syscalls.names() if _LINUX else None,
                                                source=script)
        except ValueError as e:
            raise CommandError(f"{script} output unreadable: {e}")
        lost_line = run.loss_line()
    else:
        probe = _start_bpftrace("syscount.bt", [args.pid], json_mode=True)
        stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None,
                                 args.duration, args.pid, child=probe.proc.pid)
        _err(f"Counting syscalls of PID {args.pid} (raw_syscalls)... Hit Ctrl-C to end.")
        t0 = time.monotonic()
        lines = list(probe.lines())
        seconds = time.monotonic() - t0
        rc = probe.stop()
        try:
            df = syscount_output.parse_syscount(lines, syscalls.names(), source="syscount.bt")
        except ValueError as e:
            raise CommandError(f"syscount.bt output unreadable: {e}")
        if rc not in (0, None) and df.empty and stopper.reason is None:
            raise CommandError(f"bpftrace failed: {probe.error_summary()}")
    if args.sort == "time":
        df = df.sort_values(["time_ns", "count"], ascending=False, kind="stable")
    if args.json:
        print(json.dumps({"pid": args.pid, "duration_s": round(seconds, 3),
                          "names_from": ("dtrace" if args.engine == "dtrace" and not _LINUX
                                         else syscalls.source()),
                          "syscalls": [{k: (v if k == "syscall" else int(v))
                                        for k, v in r.items()}
                                       for r in df.to_dict("records")]}))
    else:
        print(views.render_syscount(df, args.top), end="")
    names_from = ("dtrace's syscall provider" if args.engine == "dtrace" and not _LINUX
                  else syscalls.source())
    _err(f"{int(df['count'].sum())} syscalls in {seconds:.1f} s; names from {names_from}")
    if lost_line:
        _err(f"lost: {lost_line}")
    return 0


# --- threads ---------------------------------------------------------------------------

def cmd_threads(args: argparse.Namespace) -> int:
    from mongoprobe.analysis import thread_states as threads
    from mongoprobe.views import text as views
    from ..formats.threads_output import threads_snapshots

    check_trace("bpftrace", args.pid)
    if args.interval < 1:
        raise CommandError(f"-i {args.interval}: the interval is whole seconds, at least 1")
    procs = threads.ProcTasks(args.pid)
    probe = _start_bpftrace("threads.bt", [args.pid], json_mode=True)
    duration = args.duration + 0.3 if args.duration else None   # let the last tick land
    stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, duration,
                             args.pid, child=probe.proc.pid)
    _err(f"Tracing thread microstates of PID {args.pid} (sched_switch/sched_wakeup), "
         f"every {args.interval} s... Hit Ctrl-C to end.")
    printed = 0
    for dt, rows in threads.intervals(threads_snapshots(probe.lines()), procs, args.interval,
                                      args.duration):
        if args.json:
            print(json.dumps({"time": round(time.time(), 3), "pid": args.pid,
                              "interval_s": round(dt, 3), "threads": rows}), flush=True)
        else:
            print(views.render_threads(rows, time.strftime("%H:%M:%S"), dt, args.pid,
                                       args.top), flush=True)
        printed += 1
    rc = probe.stop()
    if printed == 0 and rc not in (0, None) and stopper.reason is None:
        raise CommandError(f"bpftrace failed: {probe.error_summary()}")
    return 0


# --- parser ----------------------------------------------------------------------------


def register(subparsers) -> None:
    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-p", "--pid", type=int, required=True, help="process id")
        sp.add_argument("-d", "--duration", type=float, metavar="SEC",
                        help="stop after SEC seconds (default: at Ctrl-C)")

    p = subparsers.add_parser(
        "profile", help="on-CPU (or off-CPU) stacks of a process", formatter_class=RAW,
        epilog=PROFILE_EXAMPLES,
        description="Sample the stacks of one process (all threads, or --tid) and write\n"
                    "them raw (.bt.txt: bpftrace's map print; .perf.txt: perf script) or\n"
                    "folded / as a flame graph (.folded, .svg: through mongoprobe fold and\n"
                    "mongoprobe flamegraph; the raw file is kept beside them).")
    common(p)
    p.add_argument("-F", "--frequency", type=int, default=99, metavar="HZ",
                   help="samples per second per CPU (default 99)")
    p.add_argument("--tid", type=int, help="only this thread")
    p.add_argument("--offcpu", action="store_true",
                   help="off-CPU time by stack (sched_switch) instead of CPU samples")
    p.add_argument("--engine", choices=["bpftrace", "perf", "dtrace"],
                   help="default: perf for -o *.perf.txt, dtrace for *.dtrace.txt, "
                        "else bpftrace")
    p.add_argument("--call-graph", choices=["fp", "dwarf"], default="fp",
                   help="perf's stack walking: frame pointers (default) or DWARF")
    p.add_argument("-e", "--event", help="perf event (default: cycles, else cpu-clock)")
    p.add_argument("-o", "--output", required=True, metavar="FILE",
                   help="FILE.bt.txt, FILE.perf.txt, FILE.folded or FILE.svg")
    p.set_defaults(func=cmd_profile)

    f = subparsers.add_parser("flush", help="msync/fsync/fdatasync/... latency and stacks",
                              formatter_class=RAW, epilog=FLUSH_EXAMPLES)
    common(f)
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.add_argument("--engine", choices=["bpftrace", "dtrace"], default="bpftrace")
    f.set_defaults(func=cmd_flush)

    s = subparsers.add_parser("syscount", help="syscall counts and time of a process",
                              formatter_class=RAW, epilog=SYSCOUNT_EXAMPLES)
    common(s)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--sort", choices=["count", "time"], default="count")
    s.add_argument("-n", "--top", type=int, default=0, help="show the first N (default all)")
    s.add_argument("--engine", choices=["bpftrace", "dtrace"], default="bpftrace")
    s.set_defaults(func=cmd_syscount)

    t = subparsers.add_parser("threads", help="per-thread microstates (prstat -mL)",
                              formatter_class=RAW, epilog=THREADS_EXAMPLES)
    common(t)
    t.add_argument("-i", "--interval", type=int, default=1, metavar="SEC",
                   help="print every SEC seconds (default 1)")
    t.add_argument("-n", "--top", type=int, default=20,
                   help="show the N busiest threads (default 20, 0 = all)")
    t.add_argument("--json", action="store_true", help="one JSON object per interval")
    t.set_defaults(func=cmd_threads)
