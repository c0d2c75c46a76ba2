"""What the command families share: the one error a command raises, argument types,
and the checks before a probe starts.

Importing this is cheap (standard library only): the parser is assembled on every
start, ``--help`` included.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import os
import shutil
from pathlib import Path
from typing import Callable

RAW = argparse.RawDescriptionHelpFormatter


class CommandError(Exception):
    """What a command could not do, in one line: ``main`` prints ``mongoprobe: MESSAGE``
    on stderr and exits with ``status`` (1; 2 for a mistaken request, as argparse's own
    usage errors; 130 when interrupted)."""

    def __init__(self, message: str, status: int = 1):
        super().__init__(message)
        self.status = status


def command_after(args_command: list[str], what: str) -> list[str]:
    """The load command of a REMAINDER argument, its leading ``--`` dropped;
    CommandError (status 2) when there is none."""
    command = list(args_command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        raise CommandError(f"{what} needs a command after --", 2)
    return command


def doc_line(module: str) -> str:
    """The first line of ``module``'s docstring, read from its source without importing
    it: the modules behind the commands import pandas and pymongo, half a second that
    every command's start (--help too) would pay to build the parser."""
    source = Path(importlib.util.find_spec(module).origin).read_text()
    return ast.get_docstring(ast.parse(source)).split("\n")[0]


def port(text: str) -> int:
    p = int(text)
    if not 0 < p < 65536:
        raise argparse.ArgumentTypeError(f"{text} is not a TCP port")
    return p


def positive(text: str) -> int:
    v = int(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number")
    return v


def _why_cannot_perf() -> str | None:
    if os.geteuid() != 0:
        return "profiling another process with perf needs root"
    if not shutil.which("perf"):
        return "perf is not installed (Debian: linux-perf; run scripts/setup.sh)"
    return None


def check_trace(engine: str, pid: int, tid: int | None = None) -> None:
    """Root, the tracer of ``engine`` (bpftrace, bcc, dtrace, perf; auto: none), a live
    ``pid`` and ``tid``: else CommandError saying which is missing."""
    from mongoprobe.run import tracer as probes

    why = None if engine == "auto" else {        # auto: engines.choose checks them
        "bcc": probes.why_cannot_bcc, "dtrace": probes.why_cannot_dtrace,
        "perf": _why_cannot_perf}.get(engine, probes.why_cannot_trace)()
    if why:
        raise CommandError(why)
    try:
        probes.check_pid(pid)
    except probes.ProbeError as e:
        raise CommandError(str(e)) from None
    if tid and not Path(f"/proc/{pid}/task/{tid}").exists():
        raise CommandError(f"no thread {tid} in process {pid}")


def run_dtrace(script: str, pid: int, duration: float | None,
               printed: Callable[[list[str]], bool], **kw):
    """``dtrace_engine.run`` (``kw``: args, options, on_line, banner); CommandError when
    dtrace cannot start, or failed before ``printed(lines)`` says its results are there."""
    from mongoprobe.run import dtrace_runner as dtrace_engine, tracer as probes

    try:
        run = dtrace_engine.run(script, pid, duration=duration, **kw)
    except probes.ProbeError as e:
        raise CommandError(str(e)) from None
    why = dtrace_engine.failed(run)
    if why and not printed(run.lines):
        raise CommandError(f"dtrace failed: {why}")
    return run
