"""The examples of every command's ``--help`` epilog, and how tests run them
(test_examples.py, test_examples_live.py): read from the parser itself
(``mongoprobe.cli.build_parser``), what each must print (EXPECT), the substitutions that
make one run here, and the runner that runs the ones that are processes several at once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from mongoprobe.views import flamegraph
from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import tracer as probes
from mongoprobe.model import stack_samples as stacks
from mongoprobe.cli import build_parser
from mongoprobe.pcap.capture import why_cannot_capture
from helpers.cli import in_process as cli_in_process, watch_stderr
from helpers.run_copies import edit_manifest

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "samples"
SAMPLE_RUN = SAMPLES / "load" / "run-ferretdb"

# placeholder input -> the real sample it stands for
INPUTS = {
    "out.perf": SAMPLES / "stacks" / "perf-ferretdb-mixedload.txt",
    "profile.bt.txt": SAMPLES / "stacks" / "bpftrace-profile-ferretdb.txt",
    "dtrace-ustack.txt": SAMPLES / "stacks" / "dtrace-mongod-memcntl-ustack.txt",
    "events.jsonl": SAMPLES / "stacks" / "latency-events-ferretdb.jsonl",
    "snoop.txt": SAMPLES / "probes" / "mongo_snoop-ferretdb.txt",
    "my-categories.toml": ROOT / "flamegraphs" / "categories.toml",
    "run.pcapng": SAMPLES / "pcap" / "ferretdb-mixedload.pcapng",
    "ring_00001_20261122120000.pcapng": SAMPLES / "pcap" / "ferretdb-mixedload.pcapng",
}
PCAP_PORT = json.loads((SAMPLES / "pcap" / "ferretdb-mixedload.json").read_text())["port"]

HIST = r"value  -+ Distribution -+ count"
LOST = r"lost: unmatched replies \d+, requests without reply \d+"
JSON = "json"        # stdout: JSON (one document, or one per line)

# example (without its comment) -> (where, what): a regex on stdout, stderr or a file
# the example writes; JSON: stdout parses as JSON
EXPECT = {
    # target
    "mongoprobe target start": ("stdout", r"^pid +\d+\nuri +mongodb://"),
    "mongoprobe target start --backend postgresql": ("stdout", r"^pid +\d+\nuri +mongodb://"),
    "mongoprobe target status --json": (JSON, "uri"),
    "mongoprobe target start --tls --json": ("stdout", r"tls=true"),
    "mongoprobe target stop": ("stdout", r"^stopped$"),
    # latency, snoop
    "mongoprobe latency -p 4127": ("stdout", rf"command = \w+ .*\n +{HIST}[\s\S]*{LOST}"),
    "mongoprobe latency -p 4127 -i 5 -d 60": ("stdout", r"--- whole run ---\ncommand = "),
    "mongoprobe latency -p 4127 --by op --unit us": ("stdout", r"op = OP_MSG .* us"),
    "mongoprobe latency -p 4127 --engine bcc --json": (JSON, "by_command"),
    # FerretDB has Go's crypto/tls: hooked even when it serves no TLS (0 decoded)
    "mongoprobe latency -p 4127 --engine bcc --tls on":
        ("stdout", rf"command = \w+[\s\S]*{LOST}[\s\S]*\ntls: \d+ connections decoded"),
    "mongoprobe latency -p 4127 --engine dtrace -d 30": ("stdout", r"log2 buckets"),
    "mongoprobe latency -p 4127 --events ev.jsonl -d 30": ("ev.jsonl", r'"latency_ns"'),
    "mongoprobe latency -p 4127 --events ev.parquet --events-sample 100 -d 30":
        ("ev.parquet", r"PAR1"),
    "mongoprobe snoop -p 4127": ("stdout", r"TIME\(s\) +PID[\s\S]* OP_MSG +\w+"),
    "mongoprobe snoop -p 4127 -d 10 --json": (JSON, "latency_ns"),
    "mongoprobe snoop -p 4127 --engine dtrace -d 10": ("stdout", r" OP_MSG +\w+"),
    # profile, flush, syscount, threads
    "mongoprobe profile -p 4127 -d 30 -o cpu.bt.txt": ("stderr", r"wrote cpu\.bt\.txt: \d+ samples"),
    "mongoprobe profile -p 4127 -d 30 -o cpu.perf.txt": ("stderr", r"wrote cpu\.perf\.txt: \d+ samples"),
    "mongoprobe profile -p 4127 -F 997 --tid 4133 -d 10 -o t.bt.txt":
        ("stderr", r"wrote t\.bt\.txt: \d+ samples in \d+ stacks, [01] threads"),
    "mongoprobe profile -p 4127 --offcpu -d 10 -o off.bt.txt": ("stderr", r"wrote off\.bt\.txt: \d+ us off-CPU"),
    "mongoprobe profile -p 4127 --engine perf --call-graph dwarf -d 10 -o c.perf.txt":
        ("stderr", r"wrote c\.perf\.txt: \d+ samples"),
    "mongoprobe profile -p 4127 -d 30 -o cpu.svg": ("cpu.svg", r"</svg>"),
    "mongoprobe profile -p 4127 --engine dtrace -d 30 -o cpu.svg": ("cpu.svg", r"</svg>"),
    "mongoprobe flush -p 4127": ("stdout", r"syscall = f\w*sync +count \d+|no flush calls"),
    "mongoprobe flush -p 4127 -d 60 --json": (JSON, "flushes"),
    "mongoprobe flush -p 4127 --engine dtrace -d 60": ("stderr", r"lost: DTrace"),
    "mongoprobe syscount -p 4127 -d 10": ("stdout", r"^SYSCALL +COUNT +TIME\(us\)"),
    "mongoprobe syscount -p 4127 -d 10 --sort time -n 15": ("stdout", r"^SYSCALL +COUNT"),
    "mongoprobe syscount -p 4127 -d 10 --json": (JSON, "syscalls"),
    "mongoprobe syscount -p 4127 --engine dtrace -d 10": ("stdout", r"^SYSCALL +COUNT"),
    "mongoprobe threads -p 4127": ("stdout", r"PID \d+ +interval [\d.]+ s +threads \d+\n +TID"),
    "mongoprobe threads -p 4127 -i 5 -d 60": ("stdout", r"\n +TID +NAME +USR +SYS"),
    "mongoprobe threads -p 4127 -d 10 --json": (JSON, "threads"),
    # fold, flamegraph, heatmap, categories, top
    "mongoprobe fold out.perf > out.folded": ("out.folded", r"^ferretdb;\S+ \d+$"),
    "mongoprobe fold - < out.perf > out.folded": ("out.folded", r"^ferretdb;\S+ \d+$"),
    "mongoprobe fold profile.bt.txt --format bpftrace": ("stdout", r"^ferretdb;\S+ \d+$"),
    "mongoprobe fold dtrace-ustack.txt": ("stdout", r"libc\.so\.1`memcntl \d+$"),
    "mongoprobe flamegraph out.perf -o cpu.svg": ("cpu.svg", r"</svg>"),
    "mongoprobe flamegraph out.perf --from 3254 --to 3257 -o first3s.svg": ("first3s.svg", r"</svg>"),
    "mongoprobe flamegraph profile.bt.txt --phases phases.json --phase run -o run.svg":
        ("run.svg", r"</svg>"),
    "mongoprobe flamegraph out.perf --diff 3254:3257 3257:3261 -o diff.svg": ("diff.svg", r"</svg>"),
    "mongoprobe flamegraph profile.bt.txt --phases phases.json --diff load run -o diff.svg":
        ("diff.svg", r"</svg>"),
    "mongoprobe heatmap out.perf -o cpu.png": ("stderr", r"wrote cpu\.png"),
    "mongoprobe heatmap events.jsonl --what latency -o lat.png": ("stderr", r"wrote lat\.png"),
    "mongoprobe heatmap snoop.txt --what latency --stat count -o reqs.png": ("stderr", r"wrote reqs\.png"),
    "mongoprobe categories out.perf": ("stdout", r"^PHASE +CATEGORY +SAMPLES +SHARE\n[\s\S]*sqlite"),
    "mongoprobe categories profile.bt.txt --phases phases.json --json": (JSON, "categories"),
    "mongoprobe categories out.perf --rules my-categories.toml": ("stdout", r"^PHASE +CATEGORY"),
    "mongoprobe top out.perf": ("stdout", r"^ SELF% TOTAL%  FUNCTION\n"),
    "mongoprobe top profile.bt.txt -n 50 --json": (JSON, "functions"),
    # load, record, phases, report
    "mongoprobe load --phases 10i.1q:60s,1i@1000.10q:60s,0i.10q:60s,10i.0q:60s":
        ("stdout", r"### phase end name=10i\.0q[\s\S]*### summary "),
    "mongoprobe load --uri mongodb://127.0.0.1:27017/ --phases 4i.0q:100000i":
        ("stdout", r"# phase 4i\.0q: [\d.]+ s, 300 inserts"),
    "mongoprobe load --phases 1i@100.4q:30s --pad 1024 --query-limit 10":
        ("stdout", r"pad=1024 query_limit=10"),
    "mongoprobe record --target embedded -o runs/r1 -- mongoprobe load --phases 10i.1q:60s":
        ("runs/r1/manifest.json", r'"status": "complete"'),
    "mongoprobe record --target embedded -o runs/r2 --probes latency,vmstat,iostat,pidstat "
    "-- mongoprobe load --phases 10i.1q:60s,1i@1000.10q:60s,0i.10q:60s,10i.0q:60s":
        ("runs/r2/iostat.txt", r"Device"),
    "mongoprobe record -p 4127 --uri mongodb://127.0.0.1:27017/ -o runs/r3 --probes all "
    "--events -- mongoprobe load --phases 4i.1q:60s":
        ("runs/r3/latency.events.parquet", r"PAR1"),
    "python -c 'import mongoprobe; print(mongoprobe.load_run(\"runs/r1\").phases)'":
        ("stdout", r"2i\.1q"),
    "mongoprobe phases RUN": ("stdout", r"^phases from the load tool's output: mongoprobe-load"),
    "mongoprobe phases RUN --json": (JSON, "phases"),
    "mongoprobe phases RUN --phases warm=0..4,steady=4..12": ("stdout", r"\nsteady +"),
    # compare (scratch: runs/a, runs/b, a1, a2, b1, b2 and the series runs/threads are
    # copies of the sample run, labelled threads=4 (a) and threads=2 (b); runs/pads is
    # samples/load/run-pads)
    "mongoprobe compare runs/a runs/b": ("stdout", r"^baseline a; samples: blocks"),
    "mongoprobe compare A=runs/a1,runs/a2 B=runs/b1,runs/b2":
        ("stdout", r"^baseline A; samples: the runs[\s\S]*fewer than 4 runs"),
    "mongoprobe compare runs/threads": ("stdout", r"threads=1 +threads=2"),
    "mongoprobe compare runs/a runs/b --col threads": ("stdout", r"^baseline threads=2;"),
    "mongoprobe compare runs/a runs/b --json": (JSON, "phases"),
    "mongoprobe compare runs/a runs/b --report cmp.html": ("cmp.html", r"<h2>Differences"),
    "mongoprobe compare runs/pads --flamegraphs fg/":
        ("fg/2i.1q.pad=4096-vs-pad=256.reversed.svg", r"per operation"),
    "mongoprobe series -o runs/threads --repeat 4 --vary threads=1,2 --target embedded "
    "-- mongoprobe load --phases '{threads}i.0q:30s'":
        ("runs/threads/series.json", r'"threads=1\.1",\s+"threads=2\.1"'),
    "mongoprobe report RUN -o report.html": ("report.html", r"</html>"),
    "mongoprobe report RUN": ("RUN/report.html", r"</html>"),
    "mongoprobe report RUN --diff 2i.1q 0i.2q": ("RUN/report.html", r"</html>"),
    "mongoprobe report RUN --phases warm=0..4,steady=4..12": ("RUN/report.html", r"steady"),
    # capture, pcap
    "mongoprobe capture -o run.pcapng --port 27017": ("stdout", r"^run\.pcapng$"),
    "mongoprobe capture -o run.pcapng --port 27017 -d 60": ("stdout", r"^run\.pcapng$"),
    "mongoprobe capture -o ring.pcapng --port 27017 --ring-mb 100 --ring-files 10":
        ("stdout", r"^ring_\d{5}_\d{14}\.pcapng$"),
    "mongoprobe pcap run.pcapng --port 27017": ("stdout", rf"command = insert [\s\S]*{LOST}"),
    "mongoprobe pcap run.pcapng": ("stderr", rf"^server port {PCAP_PORT} "),
    "mongoprobe pcap run.pcapng --by op --unit us": ("stdout", r"op = OP_MSG .* us"),
    "mongoprobe pcap run.pcapng --by stream": ("stdout", r"stream 0 \(client port \d+\)"),
    "mongoprobe pcap run.pcapng --json": (JSON, "pcap"),
    "mongoprobe pcap ring_*.pcapng --port 27017": ("stdout", r"command = insert "),
    # parse, quantize
    "mongoprobe parse auto samples/sysstat/iostat-x-1-3.txt": ("stdout", r"Device|device"),
    "mongoprobe parse ycsb samples/ycsb/ycsb-0.17-load.status.txt --csv": ("stdout", r"^time,"),
    "mongoprobe parse ycsb-summary samples/ycsb/ycsb-0.17-workloada-run.summary.txt --json":
        (JSON, "["),
    "mongoprobe parse iostat-totals samples/sysstat/iostat-xt-iso-2dev.txt --json": (JSON, "["),
    "mongoprobe parse iibench samples/iibench/iibench-mongo-1i-1q-30k.stdout.txt": ("stdout", r"ips"),
    "mongoprobe parse auto RUN/load.out": ("stdout", r"2i\.1q"),
    "mongoprobe parse vmstat samples/sysstat/vmstat-t-1.txt --tz UTC": ("stdout", r"UTC|\+00:00|free"),
    "vmstat -t 1 5 | mongoprobe parse vmstat - --csv": ("stdout", r"^sample,time,r,b,"),
    "mongoprobe quantize samples/ycsb/ycsb-0.17-load.status.txt": ("stdout", rf"^p99_us in usecs[\s\S]*{HIST}"),
    "mongoprobe quantize samples/ycsb/ycsb-0.17-load.status.txt -c avg_us --unit ms":
        ("stdout", r"^avg_us in msecs"),
    "mongoprobe quantize events.jsonl --unit us": ("stdout", r"^latency_ns in usecs, by command"),
    "mongoprobe quantize samples/quantize/dtrace-mongo_time-run.txt": ("stdout", HIST),
}

TRACING = {"latency", "snoop", "profile", "flush", "syscount", "threads"}


# --- the examples, from the parser -----------------------------------------------------------


def epilog_examples(epilog: str | None) -> list[str]:
    """The example lines of an epilog's ``examples:`` block: two-space indented lines, a
    more indented line continuing the one before (a backslash continuation, or a comment
    on its own line); the trailing ``# comment`` left out."""
    out: list[str] = []
    block = False
    for line in (epilog or "").splitlines():
        if line.strip() == "examples:":
            block = True
            continue
        if not block:
            continue
        if not line.strip() or not line.startswith("  "):
            block = False
        elif line.startswith("   ") and out:
            out[-1] += "\n" + line
        else:
            out.append(line[2:])
    return [_command(e) for e in out]


def _command(example: str) -> str:
    text = re.sub(r"\s*\\\n\s*", " ", example)           # join continuation lines
    text = re.sub(r"(^|\s+)# .*$", "", text, flags=re.M)      # drop the comments
    return " ".join(text.split())


def all_examples() -> dict[str, list[str]]:
    """example -> the commands whose --help shows it (the top level is "mongoprobe")."""
    parser = build_parser()
    found: dict[str, list[str]] = {}
    for e in epilog_examples(parser.epilog):
        found.setdefault(e, []).append("mongoprobe")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sp in sub.choices.items():
        for e in epilog_examples(sp.epilog):
            found.setdefault(e, []).append(name)
    return found


EXAMPLES = all_examples()


# --- running one -----------------------------------------------------------------------------


def adapt(example: str, target) -> str:
    """The example with this machine's pid, thread, port and shorter times."""
    cmd = example
    if target is not None:
        tid = next(t for t in sorted(os.listdir(f"/proc/{target.pid}/task"), key=int)
                   if int(t) != target.pid)
        cmd = re.sub(r"\b4127\b", str(target.pid), cmd)
        cmd = re.sub(r"\b4133\b", tid, cmd)
        cmd = cmd.replace("127.0.0.1:27017", f"127.0.0.1:{target.port}")
        cmd = cmd.replace("--port 27017", f"--port {target.port}")
    else:
        cmd = cmd.replace("--port 27017", f"--port {PCAP_PORT}")
    cmd = re.sub(r"(^| )-d \d+\b", r"\1-d 2", cmd)
    cmd = re.sub(r"(^| )-i \d+\b", r"\1-i 1", cmd)
    cmd = re.sub(r"(\d+i(?:@\d+)?\.\d+q):\d+[smh]\b", r"\1:2s", cmd)
    cmd = re.sub(r"(\d+i(?:@\d+)?\.\d+q):\d+i\b", r"\1:300i", cmd)
    # a series: once each value, a phase of 2 s
    cmd = re.sub(r"--repeat \d+", "--repeat 1", cmd)
    cmd = re.sub(r"(\{\w+\}i\.\d+q):\d+[smh]\b", r"\1:2s", cmd)
    return cmd.replace("RUN", "run-sample")


def needs_of(example: str) -> list[str]:
    """What an example needs here: "target" (the test FerretDB), "trace" and its engine,
    "capture" (tshark, root)."""
    words = example.split()
    cmd = words[1] if words[0] == "mongoprobe" else words[0]
    needs = []
    if cmd in TRACING or cmd in ("load", "capture") or (cmd == "record" and "-p" in words):
        needs.append("target")
    if cmd in TRACING or cmd in ("record", "series"):
        # latency, snoop and record choose their engine (auto); the others run bpftrace
        default = "auto" if cmd in ("latency", "snoop", "record", "series") else "bpftrace"
        engine = words[words.index("--engine") + 1] if "--engine" in words else default
        if any(w.endswith(".perf.txt") for w in words):
            engine = "perf"
        needs.append(engine)
    if cmd == "capture" or "all" in words:
        needs.append("capture")
    if cmd in ("record", "series") and "embedded" in words or cmd == "target":
        needs.append("ferretdb")
    if "postgresql" in words:
        needs.append("postgresql")
    if any(w.endswith(".svg") for w in words):
        needs.append("svg")
    return needs


def why_not(needs: list[str]) -> str | None:
    from mongoprobe.run import target
    for n in needs:
        why = {"bpftrace": probes.why_cannot_trace, "bcc": probes.why_cannot_bcc,
               # --engine auto runs where any engine does (bcc, bpftrace, dtrace)
               "auto": lambda: (probes.why_cannot_bcc() and probes.why_cannot_trace()
                                and probes.why_cannot_dtrace()),
               "dtrace": probes.why_cannot_dtrace, "capture": why_cannot_capture,
               "perf": lambda: (probes.why_cannot_trace() or (
                   None if shutil.which("perf") else "perf is not installed")),
               "postgresql": _why_no_postgresql,
               "ferretdb": lambda: (None if target.ferretdb_binary().exists() else
                                    f"{target.ferretdb_binary()} not built: run "
                                    "scripts/setup.sh"),
               "svg": _why_no_renderer, "target": lambda: None}[n]()
        if why:
            return why
    return None


def _why_no_postgresql() -> str | None:
    from mongoprobe.run import target
    try:
        target.postgres_bin()
    except target.TargetError as e:
        return str(e)
    return None


def _why_no_renderer() -> str | None:
    try:
        flamegraph.renderer()
    except flamegraph.RenderError as e:
        return str(e)
    return None


def scratch(tmp: Path, example: str) -> None:
    """The scratch directory an example runs in: samples/, its inputs, a copy of the
    sample run as RUN (and as runs/r1 when it reads that run), phases.json."""
    (tmp / "samples").symlink_to(SAMPLES)
    for name, src in INPUTS.items():
        (tmp / name).symlink_to(src)
    shutil.copytree(SAMPLE_RUN, tmp / "run-sample")
    if "runs/r1" in example and "-o runs/r1" not in example:
        shutil.copytree(SAMPLE_RUN, tmp / "runs" / "r1")
    if example.startswith("mongoprobe compare"):
        _compare_runs(tmp / "runs")
    t = stacks.load(INPUTS["profile.bt.txt"])["time"]
    lo, hi = float(t.min()), float(t.max()) + 1
    mid = (lo + hi) / 2
    (tmp / "phases.json").write_text(json.dumps({"phases": [
        {"name": "load", "start": lo, "end": mid}, {"name": "run", "start": mid, "end": hi}]}))


def _compare_runs(runs: Path) -> None:
    """What the compare examples read: copies of the sample run, labelled, and a series
    folder of two of them (as ``mongoprobe series`` writes it)."""
    def copy(name: str, labels: dict) -> None:
        shutil.copytree(SAMPLE_RUN, runs / name)
        edit_manifest(runs / name, labels=labels)

    for name, threads in (("a", 4), ("a1", 4), ("a2", 4), ("b", 2), ("b1", 2), ("b2", 2)):
        copy(name, {"threads": str(threads)})
    for t in (1, 2):
        copy(f"threads/threads={t}.1", {"threads": str(t), "rep": "1"})
    (runs / "threads" / "series.json").write_text(json.dumps(
        {"key": "threads", "values": ["1", "2"], "repeat": 1,
         "runs": ["threads=1.1", "threads=2.1"]}))
    # a real series with on-CPU profiles (256-byte against 4-KB documents)
    shutil.copytree(SAMPLES / "load" / "run-pads", runs / "pads")


def env_for(tmp: Path, target) -> dict:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "analyzer"),
                                                      env.get("PYTHONPATH")]))
    env["MONGOPROBE_TARGET_DIR"] = str(tmp / "target-state")
    if target is not None:
        env["MONGOPROBE_URI"] = target.uri
    return env


# Commands that neither trace, start processes nor need a shell: run in this process
# (cli.main), which saves a cold interpreter start and pandas import per example.
# (compare runs as a process, in test_examples_live.py: it figures every block of each
# run, seconds of CPU and file reads, too much for test_examples.py, a quiet file that
# runs beside the serial tests, whose probe-cost figures count every syscall's program run)
IN_PROCESS = {"fold", "flamegraph", "heatmap", "categories", "top", "phases", "report",
              "pcap", "parse", "quantize"}


def in_process(cmd: str) -> bool:
    words = cmd.split()
    return (words[0] == "mongoprobe" and words[1] in IN_PROCESS
            and not set(cmd) & set("|<>;&$`*"))


def run_in_process(cmd: str, tmp: Path, env: dict, monkeypatch):
    """cli.main(ARGV) in tmp with the example's environment (cli_in_process):
    (returncode, stdout, stderr) as _run gives them."""
    for k, v in env.items():
        if os.environ.get(k) != v:
            monkeypatch.setenv(k, v)
    r = cli_in_process(*shlex.split(cmd)[1:], cwd=tmp)
    return r.returncode, r.stdout, r.stderr


class LoadDriver:
    """The short load a tracing example sees once it is attached: ``mixedload.run``
    (2 threads, 3 rounds) on the shared target, one run at a time (its workers drop and
    fill the same collections), for every example that asks."""

    def __init__(self, uri: str):
        self.uri = uri
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._started = self._finished = 0     # runs begun, runs ended
        self._asked = 0                        # the last run someone waits for
        self._error: BaseException | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def run_after(self) -> None:
        """Returns once a whole run begun after this call has ended (a run under way
        does not count: it began before the caller was attached)."""
        with self._cond:
            want = self._started + 1
            self._asked = max(self._asked, want)
            self._cond.notify_all()
            while self._finished < want and self._error is None:
                self._cond.wait()
            if self._error is not None:
                raise RuntimeError(f"the load failed: {self._error!r}") from self._error

    def _loop(self) -> None:
        while True:
            with self._cond:
                while self._asked <= self._started and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                self._started += 1
            try:
                mixedload.run(self.uri, threads=2, rounds=3)
            except BaseException as e:      # said to every waiting example
                with self._cond:
                    self._error = e
                    self._cond.notify_all()
                return
            with self._cond:
                self._finished += 1
                self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(120)


def run(cmd: str, tmp: Path, env: dict, load: LoadDriver | None, stop_at_banner: bool):
    """bash -c CMD in tmp; a short load on the target once the command is attached
    (``load``), and SIGINT then when it has no -d. (returncode, stdout, stderr)"""
    proc = subprocess.Popen(["bash", "-c", cmd], cwd=tmp, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out: list[str] = []
    err, err_reader, attached = watch_stderr(proc)
    out_reader = threading.Thread(target=lambda: out.extend(proc.stdout), daemon=True)
    out_reader.start()
    try:
        if load is not None and "Hit Ctrl-C" in _BANNER.get(cmd.split()[1], ""):
            attached.wait(180)
            if proc.poll() is None:
                load.run_after()
                if stop_at_banner:
                    threading.Event().wait(1.5)
                    os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"{cmd} did not end within 300 s: {''.join(err)[-2000:]}")
    except BaseException:           # the load failed: the example is not left running
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        raise
    for r in (err_reader, out_reader):
        r.join(30)
    return proc.returncode, "".join(out), "".join(err)


# commands that print "... Hit Ctrl-C to end." on stderr once attached
_BANNER = {c: "Hit Ctrl-C" for c in TRACING | {"capture"}}


def target_setup(example: str, env: dict, tmp: Path) -> None:
    """target status and stop look at a started target (in this test's state dir)."""
    if example.split()[2] in ("status", "stop"):
        r = subprocess.run([sys.executable, "-m", "mongoprobe", "target", "start"],
                           cwd=tmp, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr


def run_process(example: str, tmp: Path, target, load: LoadDriver | None):
    """One example that is not in_process, as printed (adapted), in the scratch
    directory tmp: (command, returncode, stdout, stderr)."""
    scratch(tmp, example)
    env = env_for(tmp, target)
    cmd = adapt(example, target)
    words = cmd.split()
    if words[:2] == ["mongoprobe", "target"]:
        target_setup(example, env, tmp)
    try:
        rc, out, err = run(cmd, tmp, env, load,
                           stop_at_banner="-d" not in words and words[1] in _BANNER)
    finally:
        if words[:2] == ["mongoprobe", "target"]:
            subprocess.run([sys.executable, "-m", "mongoprobe", "target", "stop"], cwd=tmp,
                           env=env, capture_output=True, timeout=120)
    return cmd, rc, out, err


def check(example: str, cmd: str, rc: int, out: str, err: str, tmp: Path) -> None:
    """The example exited 0, without a traceback, and printed what EXPECT says."""
    assert rc == 0, f"{cmd}: exit {rc}\n{err[-3000:]}"
    assert "Traceback" not in err, err[-3000:]
    where, what = EXPECT[example]
    if where == JSON:
        docs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
        assert docs and (what == "[" and isinstance(docs[0], list) or what in docs[-1]), out[:500]
        return
    text = {"stdout": out, "stderr": err}.get(where)
    if text is None:
        f = tmp / where.replace("RUN", "run-sample")     # as adapt does the command
        assert f.exists(), f"{cmd}: wrote no {where}; stderr: {err[-2000:]}"
        text = f.read_text(errors="replace")
    assert re.search(what, text, re.M), f"{cmd}: {where} lacks {what!r}:\n{text[:2000]}"


def marks(example: str) -> list:
    needs = needs_of(example)
    return ([pytest.mark.root] if set(needs) & {"bpftrace", "bcc", "dtrace", "perf", "capture"}
            else []) + ([pytest.mark.target] if set(needs) & {"target", "ferretdb"} else [])


# Each example's test id, as pytest named them when one file ran them all: the example,
# or "exampleN" (N its place in the sorted list) when it is over pytest's 100 characters.
IDS = {e: e if len(e) <= 100 else f"example{i}" for i, e in enumerate(sorted(EXAMPLES))}


def params(examples) -> list:
    """pytest params of ``examples`` (sorted), each with its id and marks."""
    return [pytest.param(e, marks=marks(e), id=IDS[e]) for e in sorted(examples)]


# --- several at once -------------------------------------------------------------------------

# Examples run at once: a tracer compiles on one CPU while others wait out their -d,
# their probes' detaching (about 0.1 s per probe here), a server's start or a sleep.
PARALLEL = 8


def cost(example: str) -> int:
    """A rough rank of how long an example runs, so the longest start first: DTrace
    compiles thousands of lines of D, record starts several tracers or a server, the
    wire probes compile bcc's C."""
    words = example.split()
    if "dtrace" in words or words[1] == "record":
        return 3
    if words[1] in ("latency", "snoop", "target", "load"):
        return 2
    return 1


# `mongoprobe load` drops and fills one collection: two on the shared target at once
# would collide (record -p runs one too)
def _shares_load_collection(example: str) -> bool:
    words = example.split()
    return words[1] == "load" or (words[1] == "record" and "-p" in words)


class Runner:
    """Runs examples (not in_process) as processes, PARALLEL at once, longest first;
    ``result(example)`` waits for one: (command, returncode, stdout, stderr, scratch
    directory). ``target``: the shared FerretDB the examples that need it trace and load."""

    def __init__(self, examples, target, tmp_path_factory):
        from concurrent.futures import ThreadPoolExecutor
        self.target = target
        self.load = LoadDriver(target.uri) if target is not None else None
        self._collection = threading.Lock()
        self._pool = ThreadPoolExecutor(PARALLEL, thread_name_prefix="example")
        self._futures = {}
        for e in sorted(examples, key=lambda e: (-cost(e), e)):
            tmp = tmp_path_factory.mktemp("example")
            self._futures[e] = self._pool.submit(self._one, e, tmp)

    def _one(self, example: str, tmp: Path):
        target = self.target if "target" in needs_of(example) else None
        load = self.load if target is not None else None
        if _shares_load_collection(example):
            with self._collection:
                return (*run_process(example, tmp, target, load), tmp)
        return (*run_process(example, tmp, target, load), tmp)

    def result(self, example: str):
        return self._futures[example].result()

    def close(self) -> None:
        """Waits for every example (each ends, or is killed, in run)."""
        self._pool.shutdown(wait=True)
        if self.load is not None:
            self.load.close()
