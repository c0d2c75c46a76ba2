"""Shared fixtures: the embedded FerretDB target and the kernel-tracing skip reasons; the
test programs in C built on demand."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from mongoprobe import probes, target


def build_c(tmp_path_factory, name: str, *flags: str) -> Path:
    """tests/NAME.c compiled with FLAGS into a temporary folder (skips without a C
    compiler)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip(f"no C compiler (cc/gcc) to build tests/{name}.c")
    exe = tmp_path_factory.mktemp(name) / name
    subprocess.run([cc, *flags, "-o", str(exe), str(Path(__file__).parent / f"{name}.c")],
                   check=True)
    return exe


def _needs(reason: str | None) -> None:
    if reason:
        pytest.skip(reason)


@pytest.fixture
def need_bpftrace() -> None:
    _needs(probes.why_cannot_trace())


@pytest.fixture
def need_bcc() -> None:
    _needs(probes.why_cannot_bcc())


@pytest.fixture
def need_dtrace() -> None:
    _needs(probes.why_cannot_dtrace())


@pytest.fixture(scope="session")
def tracing_and_target() -> None:
    """Skips unless this machine can trace and setup built the embedded target: what
    every test recording a run on it needs."""
    _needs(probes.why_cannot_trace())
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")


@pytest.fixture(scope="session")
def ferretdb(tmp_path_factory):
    """A private FerretDB for the test session: TargetInfo (pid, uri, metrics_url)."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    with target.EmbeddedTarget(tmp_path_factory.mktemp("ferretdb")) as info:
        yield info
