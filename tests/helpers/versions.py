"""The tracer versions at hand as test parameters, and the known failures per version."""

from __future__ import annotations

import re
import subprocess

import pytest

from mongoprobe.run import tracer as mp_probes

SUITES = ("trixie", "sid")      # the Debian roots scripts/tracer-roots.sh builds

# (tool, version) -> why it fails there (xfail, strict: a fix shows); none today: every
# wire probe loads and counts exactly on 0.17, 0.23 and 0.27
KNOWN: dict[tuple[str, str], str] = {
}


def version_rows(engine: str, tool: str) -> list:
    """(engine, version, binary) of every version at hand of engine (bpftrace, bcc), id
    ENGINE-VERSION, its KNOWN failure with TOOL an xfail (strict); and a skipped row per
    suite wrapper missing."""
    found = mp_probes.tracer_versions()[engine]
    rows = [pytest.param(engine, version, path, id=f"{engine}-{version}",
                         marks=[pytest.mark.xfail(strict=True, reason=KNOWN[tool, version])]
                         if (tool, version) in KNOWN else [])
            for version, path in found.items()]
    prefix = "bpftrace" if engine == "bpftrace" else "python3-bcc"
    for suite in SUITES:
        wrapper = mp_probes.tools_dir() / "bin" / f"{prefix}-{suite}"
        if not wrapper.exists():
            rows.append(pytest.param(engine, None, str(wrapper), id=f"{engine}-{suite}", marks=[
                pytest.mark.skip(reason=f"{wrapper} is missing: scripts/tracer-roots.sh builds it")]))
    return rows


def bpftrace_version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True,
                         timeout=60).stdout
    m = re.search(r"v(\d+)\.(\d+)(?:\.(\d+))?", out)
    assert m, f"{binary} --version: {out!r}"
    return tuple(int(x or 0) for x in m.groups())


def dry_run_flag(binary: str) -> str:
    """bpftrace 0.22 added --dry-run; before it, -d (debug output) compiled without running."""
    return "-d" if bpftrace_version(binary) < (0, 22) else "--dry-run"
