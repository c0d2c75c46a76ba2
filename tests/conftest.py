"""Shared fixtures: the embedded FerretDB target and the kernel-tracing skip reasons."""

from __future__ import annotations

import pytest

from mongoprobe import probes, target


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
def ferretdb(tmp_path_factory):
    """A private FerretDB for the test session: TargetInfo (pid, uri, metrics_url)."""
    if not target.ferretdb_binary().exists():
        pytest.skip(f"{target.ferretdb_binary()} not built: run scripts/setup.sh")
    with target.EmbeddedTarget(tmp_path_factory.mktemp("ferretdb")) as info:
        yield info
