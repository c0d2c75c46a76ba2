"""bpftrace stack maps fold right whatever the order of the stacks in the key.

A real one-liner on the embedded FerretDB under load keeps five maps at once --
``@[ustack, kstack]``, ``@[kstack, ustack]``, ``@[kstack]``, ``@[ustack]`` and
``@[comm, kstack, ustack]`` -- from the same samples. Each folds user root first,
kernel frames toward the leaf: no kernel entry point ever sits above a Go frame, and
every map folds to the same set of stacks (up to the comm root frame).

Needs root and bpftrace, and the FerretDB that setup builds; skips with the reason."""

from __future__ import annotations

import collections
import io
import re
import subprocess
import threading

import pytest

from mongoprobe.load import mixed_workload as mixedload
from mongoprobe.run import tracer as probes
from mongoprobe.formats import bpftrace_stacks

pytestmark = pytest.mark.root

MAPS = {"uk": "ustack, kstack", "ku": "kstack, ustack", "k": "kstack", "u": "ustack",
        "cku": "comm, kstack, ustack"}
KERNEL_ROOT = re.compile(r"entry_SYSCALL_64|asm_sysvec_|asm_exc_|asm_common_interrupt"
                         r"|ret_from_fork")


def _kernel_symbols() -> frozenset[str]:
    with open("/proc/kallsyms") as f:
        return frozenset(line.split()[2] for line in f)


KERNEL_SYMBOLS = _kernel_symbols()


def _by_map(text: str) -> dict[str, str]:
    """bpftrace's exit print, cut into one text per map (entries start '@name[')."""
    out: dict[str, list[str]] = collections.defaultdict(list)
    name = None
    for line in text.splitlines():
        m = re.match(r"@(\w+)\[", line)
        if m:
            name = m.group(1)
        if name:
            out[name].append(line)
    return {k: "\n".join(v) + "\n" for k, v in out.items()}


def _fold(text: str) -> collections.Counter:
    got = collections.Counter()
    for _t, _pid, _tid, comm, frames, count, _w in bpftrace_stacks.read(io.StringIO(text)):
        if comm and frames.startswith(comm + ";"):
            frames = frames[len(comm) + 1:]
        got[frames] += count
    return got


@pytest.fixture(scope="module")
def profile(ferretdb):
    from mongoprobe.run import tracer as probes
    why = probes.why_cannot_trace()
    if why:
        pytest.skip(why)
    body = " ".join(f"@{k}[{v}] = count();" for k, v in MAPS.items())
    prog = f"profile:hz:997 /pid == {ferretdb.pid}/ {{ {body} }} interval:s:3 {{ exit(); }}"
    proc = subprocess.Popen([probes.bpftrace_binary(), "-e", prog], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={"BPFTRACE_CACHE_USER_SYMBOLS": "1",
                                 "PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})  # (chroot: sbin)
    stop = threading.Event()

    def busy():      # load until bpftrace has exited, however long attaching took
        while not stop.is_set():
            mixedload.run(ferretdb.uri, threads=4, rounds=1)

    load = threading.Thread(target=busy)
    load.start()
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        stop.set()
        load.join()
    assert proc.returncode == 0, err
    maps = _by_map(out)
    assert set(maps) == set(MAPS), (set(maps), err)
    return {k: _fold(t) for k, t in maps.items()}


def test_user_root_first_kernel_to_the_leaf(profile):
    for name, folded in profile.items():
        assert sum(folded.values()) > 50, name
        for stack in folded:
            frames = stack.split(";")
            k = next((i for i, f in enumerate(frames) if KERNEL_ROOT.match(f)), None)
            if name == "u":
                assert k is None, (name, stack)      # user stacks only
            elif name == "k":
                # kernel frames only, its entry point (when the walk reached it) first
                assert all(f in KERNEL_SYMBOLS or f == "[unknown]" for f in frames), (
                    name, stack)
                assert k in (0, None), (name, stack)
            elif k is not None:
                # every frame above the kernel's entry point is a user (Go) frame
                assert not any(KERNEL_ROOT.match(f) for f in frames[:k]), (name, stack)
                if k > 0:
                    assert not frames[0].startswith(("entry_", "asm_")), (name, stack)
        if name != "k":
            go_rooted = sum(c for s, c in folded.items()
                            if s.split(";")[0].startswith(("runtime.", "[unknown]")))
            assert go_rooted >= 0.9 * sum(folded.values()), name


def test_every_key_order_folds_to_the_same_stacks(profile):
    # the same samples, keyed four ways with both stacks: the same folded stacks
    assert profile["uk"] == profile["ku"] == profile["cku"]
