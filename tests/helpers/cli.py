"""Running the mongoprobe CLI as a user would: ``python -m mongoprobe ARGS``."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from mongoprobe.views import flamegraph

# A line of the CLI's stderr that says its probe is attached: the latency and snoop
# tools' banner starts "Tracing MongoDB"; every tool's ends "Hit Ctrl-C to end."
READY = ("Tracing MongoDB", "Hit Ctrl-C to end")
ATTACH_TIMEOUT = 300.0  # a DTrace start compiles thousands of lines of D; a guard against hangs


# Commands that only read files and write output (no tracer, no child to stop, no
# signal handler): mp() runs them in this process through cli.main, as test_examples
# does, which saves a cold interpreter start and the pandas import, about 0.5 s of CPU
# a call. The tracing commands, record, target and load keep their own process.
IN_PROCESS = {"phases", "report", "compare", "flamegraph", "heatmap", "parse", "fold",
              "top", "categories"}


def mp(*args: str, env: dict | None = None, timeout: float = 300, stdin=None,
       cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``python -m mongoprobe ARGS`` to its end, output captured as text; env: variables
    set over this process's environment. An IN_PROCESS command without env or stdin
    runs in this process (``in_process``)."""
    if args and args[0] in IN_PROCESS and not env and stdin is None:
        return in_process(*args, cwd=cwd)
    return subprocess.run([sys.executable, "-m", "mongoprobe", *args], capture_output=True,
                          text=True, timeout=timeout, stdin=stdin, cwd=cwd,
                          env={**os.environ, **(env or {})})


def in_process(*args: str, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """``mongoprobe ARGS`` through cli.main in this process, in ``cwd``: its status and
    output as the process would give them (an exception that escapes is its status 1
    and a traceback on stderr)."""
    from mongoprobe import cli
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = cli.main(list(args))
            except SystemExit as e:     # argparse and the commands' own exits
                rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            except Exception:
                traceback.print_exc()
                rc = 1
    finally:
        os.chdir(here)
    return subprocess.CompletedProcess([sys.executable, "-m", "mongoprobe", *args], rc,
                                       out.getvalue(), err.getvalue())


def at_once(call, items: dict) -> dict:
    """``call(value)`` for every (key, value) of ``items``, each from a thread of its own:
    tracers started so compile side by side, stopped so their ENDs and detaches overlap
    (a bcc or bpftrace stop, a DTrace END take about 2 s each). {key: what it returned,
    or what it raised (pytest.fail's and skip's too)}, in the items' order."""
    with ThreadPoolExecutor(len(items) or 1) as pool:
        futures = {key: pool.submit(call, value) for key, value in items.items()}
    done: dict = {}
    for key, f in futures.items():
        try:
            done[key] = f.result()
        except BaseException as e:      # pytest.fail's Failed is a BaseException
            done[key] = e
    return done


def start_cli(*args: str, env: dict | None = None) -> subprocess.Popen:
    """``python -m mongoprobe ARGS`` once its probe is attached (its banner on stderr, kept
    as proc.banner); the lines before it are read and dropped."""
    proc = subprocess.Popen([sys.executable, "-m", "mongoprobe", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})
    deadline = time.monotonic() + ATTACH_TIMEOUT
    seen = []
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(READY[0]) or READY[1] in line:
            proc.banner = line
            return proc
        if time.monotonic() > deadline or proc.poll() is not None:
            break
    proc.kill()
    _, rest = proc.communicate()
    pytest.fail(f"mongoprobe {' '.join(args)} did not attach: {''.join(seen)}{rest}")


def watch_stderr(proc: subprocess.Popen) -> tuple[list[str], threading.Thread, threading.Event]:
    """Reads proc's stderr in a thread (a pipe's lines already buffered are invisible to
    select): (its lines so far, the thread, an event set once it says it is attached --
    or its stderr has ended)."""
    err: list[str] = []
    attached = threading.Event()

    def read() -> None:
        for line in proc.stderr:
            err.append(line)
            if READY[1] in line:
                attached.set()
        attached.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return err, reader, attached


def stop_cli(proc: subprocess.Popen, timeout: float = 180) -> tuple[str, str]:
    """SIGINT (a user's Ctrl-C) to a start_cli process: its (stdout, stderr) once it has
    ended with status 0."""
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"mongoprobe did not end within {timeout} s: {err}")
    assert proc.returncode == 0, err
    return out, err


def can_render_svg() -> bool:
    """A flame-graph renderer is here (setup builds inferno)."""
    try:
        flamegraph.renderer()
    except flamegraph.RenderError:
        return False
    return True
