"""mongoprobe profile, flush, syscount, threads: where a server's time goes.

One ``cmd_<name>(args)`` per subcommand; ``register(subparsers)`` adds them to the
``mongoprobe`` parser (``cli.py`` calls it). Each runs a probe from ``probes/`` (or
``perf``) as a child process on one pid, stops it after ``-d SEC``, at Ctrl-C or when
the pid exits, and prints data on stdout, diagnostics (banner, losses) on stderr.
Missing pid, missing thread, no root, no tracer: one line and exit status 1.

profile   probes/profile.bt (or offcpu.bt) in bpftrace's text, or ``perf record -g``
          + ``perf script``; raw stacks to ``-o FILE.bt.txt`` / ``FILE.perf.txt``;
          ``.folded`` / ``.svg`` go through ``mongoprobe fold`` (``mongoprobe.stacks``).
flush     probes/flush.bt: latency histograms per flush syscall, bytes, threads,
          files and the user stacks that flush.
syscount  probes/syscount.bt: calls, time and errors per syscall, named.
threads   probes/threads.bt: the ``prstat -mL`` view, one table per interval.

``--engine dtrace`` runs the D twins instead (dtrace/profile.d, flush.d, syscount.d;
mongoprobe.dtrace_engine): the same parsers read their output, DTrace's own losses
(from its stderr) are reported on the ``lost:`` line.

The probes' own output is parsed by ``formats/flush_output.py``,
``formats/syscount_output.py`` and, for threads.bt, :func:`threads_snapshots` and
:func:`threads_interval` here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from . import probes   # stdlib only: cheap at start-up

PROFILE_EXAMPLES = """examples:
  mongoprobe profile -p 4127 -d 30 -o cpu.bt.txt        # bpftrace, 99 Hz, raw stacks
  mongoprobe profile -p 4127 -d 30 -o cpu.perf.txt      # perf record -g, perf script
  mongoprobe profile -p 4127 -F 997 --tid 4133 -d 10 -o t.bt.txt   # one thread
  mongoprobe profile -p 4127 --offcpu -d 10 -o off.bt.txt  # off-CPU time (us) by stack
  mongoprobe profile -p 4127 --engine perf --call-graph dwarf -d 10 -o c.perf.txt
  mongoprobe profile -p 4127 -d 30 -o cpu.svg           # flame graph (mongoprobe.stacks)
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
  mongoprobe syscount -p 4127 --engine dtrace -d 10   # dtrace/syscount.d
"""
THREADS_EXAMPLES = """examples:
  mongoprobe threads -p 4127              # every second until Ctrl-C (prstat -mL)
  mongoprobe threads -p 4127 -i 5 -d 60   # every 5 s for a minute
  mongoprobe threads -p 4127 -d 10 --json # one JSON object per interval
"""

RAW_SUFFIX = {"bpftrace": ".bt.txt", "perf": ".perf.txt", "dtrace": ".dtrace.txt"}
STACK_SUFFIXES = (".folded", ".svg")


def _die(msg: str) -> None:
    print(f"mongoprobe: {msg}", file=sys.stderr, flush=True)
    sys.exit(1)


def _err(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- checks and running ---------------------------------------------------------------


def _check(args: argparse.Namespace, engine: str = "bpftrace") -> None:
    """Root, the tracer, a live pid (and thread): else one line and exit 1."""

    if engine == "dtrace":
        why = probes.why_cannot_dtrace()
        if why:
            _die(why)
    elif engine == "perf":
        if os.geteuid() != 0:
            _die("profiling another process with perf needs root")
        if not shutil.which("perf"):
            _die("perf is not installed (Debian: linux-perf; run scripts/setup.sh)")
    else:
        why = probes.why_cannot_trace()
        if why:
            _die(why)
    try:
        probes.check_pid(args.pid)
    except probes.ProbeError as e:
        _die(str(e))
    tid = getattr(args, "tid", None)
    if tid and not Path(f"/proc/{args.pid}/task/{tid}").exists():
        _die(f"no thread {tid} in process {args.pid}")


def _bpftrace_env(keys_max: int | None = None) -> dict:

    env = dict(probes.BPFTRACE_ENV)
    if keys_max:
        env["BPFTRACE_MAP_KEYS_MAX"] = str(keys_max)
    return env


def _start_bpftrace(script: str | Path, argv: list, keys_max: int | None = None,
                    json_mode: bool = False):

    path = Path(script) if os.path.isabs(str(script)) else probes.probe_path(str(script))
    cmd = ["bpftrace"] + (["-f", "json"] if json_mode else []) + [str(path), *map(str, argv)]
    try:
        return probes.Probe(cmd, ready="Hit Ctrl-C", env=_bpftrace_env(keys_max))
    except probes.ProbeError as e:
        _die(str(e))


def _stack_errors(probe) -> int:
    from .formats.bpftrace_stacks import lookup_failures
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


def bt_stack_tally(lines) -> dict:
    """Count what a profile.bt/offcpu.bt print holds, without folding it.

    ``{"entries", "weight" (sum of the @[...] values), "no_ustack" (weight of entries
    whose user stack is empty: stack-map collisions or failed walks), "total"
    (@samples_total or @switches_total, None when absent), "seconds", "tids"}``.
    A check for the CLI's summary line; the stack parser is ``mongoprobe.stacks``.
    """
    entries = weight = no_ustack = 0
    total = None
    seconds, tids = set(), set()
    head = None          # header line of the entry being read
    after_sep = False    # between kstack and ustack, or no kstack
    ustack_frames = 0
    hdr = re.compile(r"^@\[(\d+), (\d+), ")
    for raw in lines:
        line = raw.rstrip("\n")
        if head is None:
            m = hdr.match(line)
            if m:
                seconds.add(int(m[1]))
                tids.add(int(m[2]))
                one = re.search(r"\]: (\d+)$", line)
                if one:      # both stacks empty: "@[3, 123, comm, , ]: 2"
                    entries += 1
                    weight += int(one[1])
                    no_ustack += int(one[1])
                    continue
                head, ustack_frames = line, 0
                after_sep = line.rstrip().endswith(", ,") or line.endswith(", , ")
                continue
            t = re.match(r"^@(samples_total|switches_total): (\d+)$", line)
            if t:
                total = int(t[2])
            continue
        s = line.strip()
        end = re.match(r"^\]: (\d+)$", s)
        if end:
            entries += 1
            weight += int(end[1])
            if ustack_frames == 0:
                no_ustack += int(end[1])
            head = None
        elif s == ",":
            after_sep = True
        elif s and after_sep:
            ustack_frames += 1
    return {"entries": entries, "weight": weight, "no_ustack": no_ustack, "total": total,
            "seconds": len(seconds), "tids": len(tids)}


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
            _die(f"{out}: .perf.txt is perf script output; use .bt.txt with --engine bpftrace")
        return "perf", out, None
    if name.endswith(".dtrace.txt"):
        if engine not in (None, "dtrace"):
            _die(f"{out}: .dtrace.txt is profile.d output; use it with --engine dtrace")
        return "dtrace", out, None
    if engine == "dtrace" and not name.endswith(STACK_SUFFIXES):
        _die(f"{out}: with --engine dtrace the output name ends in .dtrace.txt, .folded or .svg")
    if name.endswith(".bt.txt"):
        if engine == "perf":
            _die(f"{out}: .bt.txt is bpftrace output; use .perf.txt with --engine perf")
        return "bpftrace", out, None
    if name.endswith(STACK_SUFFIXES):
        engine = engine or "bpftrace"
        import importlib.util
        if importlib.util.find_spec("mongoprobe.stacks") is None:
            _die(f"{out}: writing {out.suffix} needs mongoprobe.stacks, which this "
                 f"checkout does not have yet; use -o FILE{RAW_SUFFIX[engine]} for raw stacks")
        raw = out.with_name(name[: -len(out.suffix)] + RAW_SUFFIX[engine])
        return engine, raw, out
    _die(f"{out}: the output name must end in .bt.txt, .perf.txt, .dtrace.txt, .folded or .svg")


def cmd_profile(args: argparse.Namespace) -> int:
    engine, raw, converted = _profile_paths(args)
    if args.frequency <= 0 or args.frequency > 10000:
        _die(f"-F {args.frequency}: the frequency must be 1..10000 Hz")
    if engine == "bpftrace" and args.call_graph == "dwarf":
        _die("bpftrace walks frame pointers only: use --engine perf for --call-graph dwarf")
    if engine in ("perf", "dtrace") and args.offcpu:
        _die("--offcpu needs --engine bpftrace (sched_switch stacks)")
    if engine == "dtrace" and args.call_graph == "dwarf":
        _die("dtrace's ustack() walks frame pointers: use --engine perf for --call-graph dwarf")
    _check(args, engine)
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
    from . import dtrace_engine
    try:
        run = dtrace_engine.run(script, args.pid, argv, duration=args.duration, banner=banner)
    except probes.ProbeError as e:
        _die(str(e))
    why = dtrace_engine.failed(run)
    if why and not run.lines[3:]:
        _die(f"dtrace failed: {why}")
    return run


def _d_no_ustack(lines) -> int:
    """Samples of profile.d's entries whose user stack (after the "," line) is empty."""
    n, frames, after = 0, 0, False
    for line in lines:
        s = line.strip()
        if s.startswith("@["):
            frames, after = 0, False
        elif s == ",":
            after = True
        elif m := re.match(r"^\]: (\d+)$", s):
            n += int(m[1]) if after and frames == 0 else 0
            after = False
        elif after and s:
            frames += 1
    return n


def _profile_dtrace(args: argparse.Namespace, raw: Path) -> int:
    """dtrace/profile.d at -F HZ (its rate is in the probe name: profile-97)."""
    from .formats import dtrace_stacks

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
    no_ustack = _d_no_ustack(run.lines)
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
                           args.duration, args.pid)
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
    tally = bt_stack_tally(raw.read_text().splitlines())
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
        _die(f"bpftrace failed: {probe.error_summary()}")
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
            _die(f"perf record did not start: {''.join(err_lines).strip()[-200:]}")
        os.read(ack_fd, 16)

        def stop() -> None:
            try:
                os.killpg(proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass

        stopper = probes.Stopper(stop, lambda: proc.poll() is None, args.duration, args.pid)
        target = f"thread {args.tid} of PID {args.pid}" if args.tid else f"PID {args.pid}"
        _err(f"Sampling {target}: {event} at {args.frequency} Hz, call graph "
             f"{args.call_graph} (perf record)... Hit Ctrl-C to end.")
        proc.wait()
        os.close(ctl_fd)
        os.close(ack_fd)
        if stopper.reason is None:
            stopper.reason = "perf exited"
        if not data.exists() or data.stat().st_size == 0:
            _die(f"perf record wrote nothing: {''.join(err_lines).strip()[-200:]}")
        with open(raw, "w") as fh:
            r = subprocess.run(["perf", "script", "-F", "+pid", "-i", str(data)],
                               stdout=fh, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        _die(f"perf script failed: {r.stderr.strip().splitlines()[-1:] or r.returncode}")
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
    """raw stacks -> ``mongoprobe fold`` (.folded) or ``mongoprobe flamegraph`` (.svg).

    Through the subcommands' contracts (mongoprobe.stacks_cli), in a child process, so
    their messages and exit status are theirs."""
    if out.suffix == ".folded":
        with open(out, "w") as fh:
            r = subprocess.run([sys.executable, "-m", "mongoprobe", "fold", str(raw),
                                "--format", fmt], stdout=fh, stderr=subprocess.PIPE,
                               text=True)
    else:
        what = "Off-CPU time" if args.offcpu else "CPU"
        thread = f" thread {args.tid}" if args.tid else ""
        r = subprocess.run([sys.executable, "-m", "mongoprobe", "flamegraph", str(raw),
                            "--format", fmt, "--pid", str(args.pid), "--title",
                            f"{what}: PID {args.pid}{thread} ({raw.name})", "-o", str(out)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        last = (r.stderr.strip().splitlines() or [f"exit status {r.returncode}"])[-1]
        _die(f"{out}: {last.removeprefix('mongoprobe: ')} (raw stacks kept in {raw})")
    for line in r.stderr.splitlines():
        _err(line)
    _err(f"wrote {out} (raw stacks: {raw})")
    return 0


# --- flush -----------------------------------------------------------------------------


def _short(frame: str, width: int = 72) -> str:
    """Keep a frame on one line of the 80-column table: cut the middle, keep the end."""
    return frame if len(frame) <= width else frame[: 20] + "..." + frame[-(width - 23):]


def _fd_path(pid: int, fd: int) -> str:
    if fd < 0:
        return "(mapped memory)"
    try:
        return os.readlink(f"/proc/{pid}/fd/{fd}")
    except OSError:
        return "(closed by now)"


def render_flush(res, pid: int | None = None, top_stacks: int = 3) -> str:
    """Text report of a :class:`formats.flush_output.FlushResult`."""
    from . import histogram

    out = []
    if res.calls.empty:
        out.append("no flush calls (msync, fsync, fdatasync, sync_file_range, syncfs)")
    for r in res.calls.itertuples(index=False):
        h = res.hist.get(r.syscall, histogram.empty())
        mx = int(h[h["count"] > 0]["hi"].max()) if histogram.total(h) else 0
        extra = f"   bytes {r.bytes:,}" if r.syscall in ("msync", "sync_file_range") else ""
        out.append(f"syscall = {r.syscall}   count {r.count}   avg {r.avg_ns / 1000:,.0f} us"
                   f"   max < {mx / 1000:,.0f} us   errors {r.errors}{extra}")
        if histogram.total(h):
            out.append(histogram.render_quantize(h, unit="ns").rstrip("\n"))
        out.append("")
    if not res.threads.empty:
        out.append(f"{'TID':>8} {'COMM':<16} {'SYSCALL':<16} {'CALLS':>8}")
        for r in res.threads.itertuples(index=False):
            out.append(f"{r.tid:>8} {r.comm[:16]:<16} {r.syscall:<16} {r.count:>8}")
        out.append("")
    if not res.fds.empty:
        out.append(f"{'SYSCALL':<16} {'FD':>5} {'CALLS':>8}  FILE")
        for r in res.fds.itertuples(index=False):
            path = _fd_path(pid, int(r.fd)) if pid else ""
            out.append(f"{r.syscall:<16} {r.fd:>5} {r.count:>8}  {path}")
        out.append("")
    if not res.msync.empty:
        out.append(f"{'MSYNC ADDR':>18} {'LEN':>14} {'FLAGS':>6} {'CALLS':>8}")
        for r in res.msync.itertuples(index=False):
            out.append(f"{r.addr:>#18x} {r.len:>14,} {r.flags:>6} {r.count:>8}")
        out.append("")
    for name, g in res.stacks.groupby("syscall", sort=False):
        for r in g.head(top_stacks).itertuples(index=False):
            out.append(f"{name}: {r.count} calls from")
            out.extend(f"    {_short(f)}" for f in (r.frames or ("[no user stack]",)))
        if len(g) > top_stacks:
            rest = int(g["count"].iloc[top_stacks:].sum())
            out.append(f"{name}: {len(g) - top_stacks} more stacks ({rest} calls; "
                       "--json has all)")
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def cmd_flush(args: argparse.Namespace) -> int:
    from .formats.flush_output import parse_flush

    _check(args, args.engine)
    if args.engine == "dtrace":
        return _flush_dtrace(args)
    probe = _start_bpftrace("flush.bt", [args.pid], json_mode=True)
    stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, args.duration,
                       args.pid)
    _err(f"Tracing flushes of PID {args.pid} (msync fsync fdatasync sync_file_range "
         "syncfs)... Hit Ctrl-C to end.")
    lines = list(probe.lines())
    rc = probe.stop()
    try:
        res = parse_flush(lines, "flush.bt")
    except ValueError as e:
        _die(f"flush.bt output unreadable: {e}")
    if rc not in (0, None) and res.calls.empty and stopper.reason is None:
        _die(f"bpftrace failed: {probe.error_summary()}")
    lost = _stack_errors(probe)
    if args.json:
        j = res.to_json()
        j["pid"] = args.pid
        for f in j["fds"]:
            f["path"] = _fd_path(args.pid, int(f["fd"]))
        j["lost"] = {"stacks": lost}
        print(json.dumps(j))
    else:
        print(render_flush(res, args.pid), end="")
    _err(f"lost: {lost} stacks (stack-map collisions)")
    return 0


def _flush_dtrace(args: argparse.Namespace) -> int:
    """dtrace/flush.d: msync (memcntl MC_SYNC on illumos), fsync, fdatasync, and on Linux
    sync_file_range and syncfs; flush_output reads it as it reads flush.bt's."""
    from .formats.flush_output import parse_flush

    run = _run_dtrace("flush.d", args, banner=f"Tracing flushes of PID {args.pid} (dtrace "
                      "flush.d)... Hit Ctrl-C to end.")
    try:
        res = parse_flush([ln.rstrip("\n") for ln in run.lines], "flush.d")
    except ValueError as e:
        _die(f"flush.d output unreadable: {e}")
    if args.json:
        j = res.to_json()
        j["pid"] = args.pid
        for f in j["fds"]:
            f["path"] = _fd_path(args.pid, int(f["fd"]))
        j["lost"] = {"dropped": run.dropped}
        print(json.dumps(j))
    else:
        print(render_flush(res, args.pid), end="")
    _err(f"lost: {run.loss_line()}")
    return 0


# --- syscount --------------------------------------------------------------------------


def render_syscount(df, top: int = 0) -> str:
    rows = df if not top else df.head(top)
    out = [f"{'SYSCALL':<22} {'COUNT':>10} {'TIME(us)':>14} {'AVG(us)':>10} {'ERRORS':>8}"]
    for r in rows.itertuples(index=False):
        out.append(f"{r.syscall[:22]:<22} {r.count:>10} {r.time_ns / 1000:>14,.0f} "
                   f"{r.avg_ns / 1000:>10,.1f} {r.errors:>8}")
    if top and len(df) > top:
        out.append(f"({len(df) - top} more syscalls, {int(df['count'].iloc[top:].sum())} calls)")
    return "\n".join(out) + "\n"


def cmd_syscount(args: argparse.Namespace) -> int:
    from . import syscalls
    from .formats import syscount_output

    _check(args, args.engine)
    lost_line = None
    if args.engine == "dtrace":
        t0 = time.monotonic()
        run = _run_dtrace("syscount.d", args, banner=f"Counting syscalls of PID {args.pid} "
                          "(dtrace syscount.d)... Hit Ctrl-C to end.")
        seconds = time.monotonic() - t0
        try:   # D prints names, not numbers
            df = syscount_output.parse_syscount(run.lines, source="syscount.d")
        except ValueError as e:
            _die(f"syscount.d output unreadable: {e}")
        lost_line = run.loss_line()
    else:
        probe = _start_bpftrace("syscount.bt", [args.pid], json_mode=True)
        stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None,
                                 args.duration, args.pid)
        _err(f"Counting syscalls of PID {args.pid} (raw_syscalls)... Hit Ctrl-C to end.")
        t0 = time.monotonic()
        lines = list(probe.lines())
        seconds = time.monotonic() - t0
        rc = probe.stop()
        try:
            df = syscount_output.parse_syscount(lines, syscalls.names(), source="syscount.bt")
        except ValueError as e:
            _die(f"syscount.bt output unreadable: {e}")
        if rc not in (0, None) and df.empty and stopper.reason is None:
            _die(f"bpftrace failed: {probe.error_summary()}")
    if args.sort == "time":
        df = df.sort_values(["time_ns", "count"], ascending=False, kind="stable")
    if args.json:
        print(json.dumps({"pid": args.pid, "duration_s": round(seconds, 3),
                          "names_from": ("dtrace" if args.engine == "dtrace"
                                         else syscalls.source()),
                          "syscalls": [{k: (v if k == "syscall" else int(v))
                                        for k, v in r.items()}
                                       for r in df.to_dict("records")]}))
    else:
        print(render_syscount(df, args.top), end="")
    names_from = "dtrace's syscall provider" if args.engine == "dtrace" else syscalls.source()
    _err(f"{int(df['count'].sum())} syscalls in {seconds:.1f} s; names from {names_from}")
    if lost_line:
        _err(f"lost: {lost_line}")
    return 0


# --- threads ---------------------------------------------------------------------------

_TICK = re.compile(r"# tick monotonic_ns=(\d+)( final)?")
_TEXT_MAP = re.compile(r"^@(oncpu_ns|runq_ns|vcx|icx|on_since|rq_since)\[(\d+)\]: (\d+)$")
THREAD_MAPS = ("oncpu_ns", "runq_ns", "vcx", "icx", "on_since", "rq_since")


def threads_snapshots(lines):
    """threads.bt output (bpftrace text or ``-f json`` lines) -> snapshots, as they come.

    Yields ``(tick_ns, maps, final)`` with ``maps[name] = {tid: int}`` for each name
    in THREAD_MAPS, once the snapshot is complete (its ``# tick end`` line, the next
    tick, or the end of input). The first one (printed from BEGIN) has empty maps;
    ``final`` marks the one printed at the end (a partial interval).
    """
    cur: tuple[int, dict, bool] | None = None

    def new(t: int, final: bool) -> tuple[int, dict, bool]:
        return t, {m: {} for m in THREAD_MAPS}, final

    for line in lines:
        s = line.strip()
        if not s:
            continue
        if s.startswith("{"):
            try:
                rec = json.loads(s)
            except ValueError:
                continue
            kind, data = rec.get("type"), rec.get("data")
            if kind == "printf":
                text = str(data)
            elif kind == "map" and cur is not None:
                for name, value in data.items():
                    name = name.lstrip("@")
                    if name in THREAD_MAPS:
                        cur[1][name].update({int(k): int(v) for k, v in value.items()})
                continue
            else:
                continue
        else:
            text = s
            m = _TEXT_MAP.match(s)
            if m and cur is not None:
                cur[1][m[1]][int(m[2])] = int(m[3])
                continue
        if text.startswith("# tick end"):
            if cur is not None:
                yield cur
                cur = None
            continue
        t = _TICK.match(text)
        if t:
            if cur is not None:
                yield cur
            cur = new(int(t[1]), bool(t[2]))
    if cur is not None:
        yield cur


def _with_carry(total: dict, since: dict, t: int, tid: int) -> int:
    v = total.get(tid, 0)
    s = since.get(tid)
    if s and s < t:
        v += t - s
    return v


def threads_interval(a, b, alive: set[int] | None = None) -> list[dict]:
    """Per-thread microstates between snapshots ``a`` and ``b`` (``(tick_ns, maps)``).

    Rows: tid, oncpu_ns, lat_ns, vcx, icx and the percentages oncpu_pct, lat_pct,
    slp_pct (= 100 - oncpu - lat) of the interval. Time caught mid-state at a tick
    (``on_since``/``rq_since``) is added up to that tick. ``alive``: threads that
    exist now (from /proc); threads neither alive nor active are left out, and a
    thread that is gone gets no carry.
    """
    ta, ma, tb, mb = a[0], a[1], b[0], b[1]
    dt = max(tb - ta, 1)
    tids = set()
    for m in (mb,):
        for name in ("oncpu_ns", "runq_ns", "vcx", "icx", "on_since", "rq_since"):
            tids |= set(m[name])
    tids |= alive or set()
    rows = []
    for tid in sorted(tids):
        gone = alive is not None and tid not in alive
        since_b_on = {} if gone else mb["on_since"]
        since_b_rq = {} if gone else mb["rq_since"]
        on = (_with_carry(mb["oncpu_ns"], since_b_on, tb, tid)
              - _with_carry(ma["oncpu_ns"], ma["on_since"], ta, tid))
        lat = (_with_carry(mb["runq_ns"], since_b_rq, tb, tid)
               - _with_carry(ma["runq_ns"], ma["rq_since"], ta, tid))
        on, lat = min(max(on, 0), dt), min(max(lat, 0), dt)
        lat = min(lat, dt - on)
        vcx = mb["vcx"].get(tid, 0) - ma["vcx"].get(tid, 0)
        icx = mb["icx"].get(tid, 0) - ma["icx"].get(tid, 0)
        if gone and not (on or lat or vcx or icx):
            continue
        rows.append({"tid": tid, "oncpu_ns": on, "lat_ns": lat, "vcx": max(vcx, 0),
                     "icx": max(icx, 0), "oncpu_pct": round(100 * on / dt, 1),
                     "lat_pct": round(100 * lat / dt, 1),
                     "slp_pct": round(100 * (dt - on - lat) / dt, 1)})
    return rows


class _ProcTasks:
    """Names and user/system ticks of a process's threads from /proc."""

    def __init__(self, pid: int):
        self.pid = pid
        self.names: dict[int, str] = {}
        self.hz = os.sysconf("SC_CLK_TCK")

    def read(self) -> dict[int, tuple[int, int]]:
        ticks = {}
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{self.pid}/task")]
        except OSError:
            return ticks
        for tid in tids:
            try:
                with open(f"/proc/{self.pid}/task/{tid}/stat") as fh:
                    stat = fh.read()
            except OSError:
                continue
            comm = stat[stat.index("(") + 1: stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            self.names[tid] = comm
            ticks[tid] = (int(fields[11]), int(fields[12]))   # utime, stime
        return ticks


def render_threads(rows: list[dict], when: str, dt_s: float, pid: int, top: int) -> str:
    out = [f"{when}  PID {pid}  interval {dt_s:.2f} s  threads {len(rows)}",
           f"{'TID':>8} {'NAME':<16} {'USR':>5} {'SYS':>5} {'CPU':>5} {'LAT':>5} {'SLP':>5}"
           f" {'VCX':>7} {'ICX':>7}"]
    for r in rows[: top or None]:
        usr = "-" if r["usr_pct"] is None else f"{r['usr_pct']:.1f}"
        sys_ = "-" if r["sys_pct"] is None else f"{r['sys_pct']:.1f}"
        out.append(f"{r['tid']:>8} {r['name'][:16]:<16} {usr:>5} {sys_:>5} "
                   f"{r['oncpu_pct']:>5.1f} {r['lat_pct']:>5.1f} {r['slp_pct']:>5.1f} "
                   f"{r['vcx']:>7} {r['icx']:>7}")
    if top and len(rows) > top:
        out.append(f"({len(rows) - top} more threads)")
    return "\n".join(out) + "\n"


def cmd_threads(args: argparse.Namespace) -> int:
    _check(args)
    if args.interval < 1:
        _die(f"-i {args.interval}: the interval is whole seconds, at least 1")
    procs = _ProcTasks(args.pid)
    probe = _start_bpftrace("threads.bt", [args.pid], json_mode=True)
    duration = args.duration + 0.3 if args.duration else None   # let the last tick land
    stopper = probes.Stopper(probe.interrupt, lambda: probe.proc.poll() is None, duration,
                       args.pid)
    _err(f"Tracing thread microstates of PID {args.pid} (sched_switch/sched_wakeup), "
         f"every {args.interval} s... Hit Ctrl-C to end.")
    last = None          # (snapshot, /proc ticks) at the start of the current interval
    n = 0
    printed = 0
    for snap in threads_snapshots(probe.lines()):
        ticks = procs.read()
        if last is None:
            last, n = (snap, ticks), 0
            continue
        n += 1
        final = snap[2]
        dt = (snap[0] - last[0][0]) / 1e9
        if n < args.interval and not final:
            continue
        if final and dt < 0.5 * args.interval:
            break        # the piece after the last full interval
        if args.duration and printed * args.interval >= args.duration:
            break
        rows = threads_interval(last[0], snap, set(ticks) if ticks else None)
        for r in rows:
            r["name"] = procs.names.get(r["tid"], "?")
            a, b = last[1].get(r["tid"]), ticks.get(r["tid"])
            if a and b:
                r["usr_pct"] = round(100 * (b[0] - a[0]) / procs.hz / dt, 1)
                r["sys_pct"] = round(100 * (b[1] - a[1]) / procs.hz / dt, 1)
            else:
                r["usr_pct"] = r["sys_pct"] = None
        rows.sort(key=lambda r: (-r["oncpu_pct"], -r["lat_pct"], r["tid"]))
        when = time.strftime("%H:%M:%S")
        if args.json:
            print(json.dumps({"time": round(time.time(), 3), "pid": args.pid,
                              "interval_s": round(dt, 3), "threads": rows}), flush=True)
        else:
            print(render_threads(rows, when, dt, args.pid, args.top), flush=True)
        printed += 1
        last, n = (snap, ticks), 0
    rc = probe.stop()
    if printed == 0 and rc not in (0, None) and stopper.reason is None:
        _die(f"bpftrace failed: {probe.error_summary()}")
    return 0


# --- parser ----------------------------------------------------------------------------


def register(subparsers) -> None:
    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("-p", "--pid", type=int, required=True, help="process id")
        sp.add_argument("-d", "--duration", type=float, metavar="SEC",
                        help="stop after SEC seconds (default: at Ctrl-C)")

    raw = argparse.RawDescriptionHelpFormatter
    p = subparsers.add_parser(
        "profile", help="on-CPU (or off-CPU) stacks of a process", formatter_class=raw,
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
                              formatter_class=raw, epilog=FLUSH_EXAMPLES)
    common(f)
    f.add_argument("--json", action="store_true", help="machine-readable output")
    f.add_argument("--engine", choices=["bpftrace", "dtrace"], default="bpftrace")
    f.set_defaults(func=cmd_flush)

    s = subparsers.add_parser("syscount", help="syscall counts and time of a process",
                              formatter_class=raw, epilog=SYSCOUNT_EXAMPLES)
    common(s)
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.add_argument("--sort", choices=["count", "time"], default="count")
    s.add_argument("-n", "--top", type=int, default=0, help="show the first N (default all)")
    s.add_argument("--engine", choices=["bpftrace", "dtrace"], default="bpftrace")
    s.set_defaults(func=cmd_syscount)

    t = subparsers.add_parser("threads", help="per-thread microstates (prstat -mL)",
                              formatter_class=raw, epilog=THREADS_EXAMPLES)
    common(t)
    t.add_argument("-i", "--interval", type=int, default=1, metavar="SEC",
                   help="print every SEC seconds (default 1)")
    t.add_argument("-n", "--top", type=int, default=20,
                   help="show the N busiest threads (default 20, 0 = all)")
    t.add_argument("--json", action="store_true", help="one JSON object per interval")
    t.set_defaults(func=cmd_threads)
