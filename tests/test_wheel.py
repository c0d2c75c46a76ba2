"""The package as a user installs it: the wheel built from this checkout, installed into
a fresh venv, run from a folder outside the checkout with no MONGOPROBE_* path variable
and no PYTHONPATH. Its probes, D scripts and flame-graph rules must come from the
package data (mongoprobe/_data/, setup.py), and the tracers must run them from there.

The venv gets only the wheel; the dependencies (pandas, ...) are this interpreter's own,
seen through a .pth file, so nothing is downloaded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

import wireclient
from helpers.cli import watch_stderr
from helpers.wire import wireserver
from mongoprobe.views import flamegraph
from mongoprobe.run import tracer as probes

ROOT = Path(__file__).resolve().parents[1]
DATA = ("probes", "dtrace", "flamegraphs")
# the variables that point the package at data folders: a user of a wheel sets none
DATA_VARS = ("MONGOPROBE_PROBES", "MONGOPROBE_DTRACE_SCRIPTS", "MONGOPROBE_CATEGORIES",
             "MONGOPROBE_SHARED", "PYTHONPATH")


def user_env(**extra: str) -> dict:
    return {**{k: v for k, v in os.environ.items() if k not in DATA_VARS}, **extra}


def run(argv: list, cwd: Path, timeout: float = 120, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=cwd, env=user_env(**extra), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv with the wheel of this checkout installed (its files as git sees
    them: tracked and new, no build/ or caches of an earlier build)."""
    if not shutil.which("git"):
        pytest.skip("git is needed to list the checkout's files")
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
                           capture_output=True, check=True).stdout.decode().split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():        # a file deleted but not yet committed is listed
            (src / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, src / f)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    r = subprocess.run([*pip, "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "-w", str(tmp / "dist"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    [wheel] = (tmp / "dist").glob("mongoprobe-*.whl")
    env = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(env)], check=True)
    r = subprocess.run([*pip, "--python", str(env / "bin" / "python"), "install", "-q",
                        "--no-deps", "--no-index", str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    # Written after the install, so pip never saw the checkout's own (editable)
    # mongoprobe there; .pth files of that folder are not run, so it stays hidden.
    purelib = run([env / "bin" / "python", "-c",
                   "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp).stdout
    Path(purelib.strip(), "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return env


def installed_package(venv: Path) -> Path:
    out = run([venv / "bin" / "python", "-c", "import mongoprobe; print(mongoprobe.__file__)"],
              venv.parent)
    assert out.returncode == 0, out.stderr
    return Path(out.stdout.strip()).parent


def test_wheel_ships_and_finds_its_data(venv):
    pkg = installed_package(venv)
    assert pkg.is_relative_to(venv) and pkg.name == "mongoprobe"
    # every file of the three folders, as in the checkout
    tracked = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard",
                              *DATA], capture_output=True, text=True, check=True).stdout.split()
    shipped = sorted(str(p.relative_to(pkg / "_data")) for p in (pkg / "_data").rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts)
    assert shipped == sorted(f for f in tracked if (ROOT / f).is_file())
    for f in shipped:
        assert (pkg / "_data" / f).read_bytes() == (ROOT / f).read_bytes(), f

    code = ("import json; from mongoprobe.run import tracer as probes; from mongoprobe.analysis import cpu_categories as categories; print(json.dumps(["
            "str(probes.probes_dir()), str(probes.dtrace_dir()), "
            "str(categories.categories_file()), probes.shared_dir()]))")
    r = run([venv / "bin" / "python", "-c", code], venv.parent)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [str(pkg / "_data" / "probes"), str(pkg / "_data" / "dtrace"),
                                    str(pkg / "_data" / "flamegraphs" / "categories.toml"),
                                    None]       # no shared folder beside an installed package
    # ... and the override still comes first
    r = run([venv / "bin" / "python", "-c", code], venv.parent, MONGOPROBE_PROBES="/elsewhere")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0] == "/elsewhere"


def test_probe_tools_load_package_modules_where_they_are(venv):
    """probes/packagefiles.py, run by the python the bcc tools run under, finds the
    package's modules beside the copy of probes/ it is in: the installed package's
    from the wheel's copy, the checkout's from the checkout."""
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import packagefiles; "
            "print(packagefiles.package_module('wire.facts').__file__)")
    pkg = installed_package(venv)
    for probes_folder, package in ((pkg / "_data" / "probes", pkg),
                                   (ROOT / "probes", ROOT / "analyzer" / "mongoprobe")):
        r = run([probes.bcc_python(), "-c", code, str(probes_folder)], venv.parent)
        assert r.returncode == 0, r.stderr
        assert Path(r.stdout.strip()) == package / "wire" / "facts.py"


@pytest.mark.parametrize("engine", ["bpftrace", "bcc"])
def test_latency_from_the_wheel(venv, engine, tmp_path, request):
    request.getfixturevalue("need_bpftrace" if engine == "bpftrace" else "need_bcc")
    pings = 40
    with wireserver("readwrite", tmp_path) as (pid, port):
        proc = subprocess.Popen(
            [venv / "bin" / "mongoprobe", "latency", "-p", str(pid), "--json",
             "--engine", engine], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=user_env())
        # attached once it says so on stderr; then a known load, then Ctrl-C (a -d 2 run
        # once ended before the 40 pings of a loaded machine had: 36 counted)
        err, reader, attached = watch_stderr(proc)
        try:
            attached.wait(60)
            assert proc.poll() is None, f"mongoprobe latency --engine {engine}: {''.join(err)}"
            c = wireclient.Conn(port)
            for _ in range(pings):
                c.call(c.op_msg({"ping": 1}))
            c.close()
            time.sleep(0.3)     # a send's exit tracepoint may run after the client has it
            proc.send_signal(signal.SIGINT)
            out = proc.stdout.read()        # until it exits
            proc.wait(60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            reader.join(10)
            proc.stdout.close()
    assert proc.returncode == 0, "".join(err)
    doc = json.loads(out)
    assert doc["engine"] == engine
    assert {k: v["count"] for k, v in doc["by_command"].items()} == {"ping": pings}


def test_fold_flamegraph_categories_from_the_wheel(venv, tmp_path):
    sample = ROOT / "samples" / "stacks" / "perf-ferretdb-small.txt"
    mp = venv / "bin" / "mongoprobe"
    r = run([mp, "fold", sample], tmp_path)
    assert r.returncode == 0, r.stderr
    folded = r.stdout.splitlines()
    assert folded and all(line.rsplit(" ", 1)[1].isdigit() for line in folded)
    # the category rules are the package's copy of flamegraphs/categories.toml
    r = run([mp, "categories", sample, "--json"], tmp_path)
    assert r.returncode == 0, r.stderr
    cats = json.loads(r.stdout)
    assert cats["rules"] == str(installed_package(venv) / "_data" / "flamegraphs"
                                / "categories.toml")
    assert {c["category"] for c in cats["categories"]} - {"other"}
    try:
        flamegraph.renderer()
    except flamegraph.RenderError as e:
        pytest.skip(str(e))
    r = run([mp, "flamegraph", sample, "-o", "cpu.svg"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "cpu.svg").read_text().rstrip().endswith("</svg>")
