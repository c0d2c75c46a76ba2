"""tests/flushloop.c, built once per module, and its running instances (`loop`)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest
from conftest import build_c


@pytest.fixture(scope="module")
def flushloop(tmp_path_factory) -> Path:
    # Frame pointers, so the probes' user stacks reach main().
    return build_c(tmp_path_factory, "flushloop", "-O0", "-fno-omit-frame-pointer", "-pthread")


class Loop:
    """A running flushloop: ``pid``; ``go()`` starts its work and waits for "done"."""

    def __init__(self, exe: Path, *args: str):
        self.proc = subprocess.Popen([str(exe), *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        ready = self.proc.stdout.readline().split()
        assert ready[:1] == ["ready"], ready
        self.pid = int(ready[1])

    def go(self, timeout: float = 60) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        done = []
        t = threading.Thread(target=lambda: done.append(self.proc.stdout.readline()))
        t.start()
        t.join(timeout)
        assert done == ["done\n"], done

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        self.proc.wait(10)


@pytest.fixture
def loop(flushloop):
    made = []

    def make(*args: str) -> Loop:
        made.append(Loop(flushloop, *args))
        return made[-1]

    yield make
    for lp in made:
        lp.close()
