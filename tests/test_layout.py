"""The package's layout (issue 27): one package per data stage, named for it, and data
flowing one way: a module imports its own stage and earlier ones only.

mongoprobe/__init__.py's docstring says what each stage is. KNOWN lists today's imports
against the order, each with why; the test fails on a new one and on one that is gone,
so the change that removes one removes it here too."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "analyzer" / "mongoprobe"

# The order data flows in.
STAGES = ["wire", "formats", "model", "loadtools", "pcap", "run", "analysis", "views",
          "load", "cli"]

# Directly under mongoprobe/: the package, `python -m mongoprobe`, and progress.py, a
# terminal progress line that both model/ (event store) and run/ (run folder) use.
TOP_LEVEL = {"__init__.py", "__main__.py", "progress.py"}

# (importer, imported) against the order -> why it is so today
KNOWN = {
    ("formats.bpftrace_latency", "run.tracer"):
        "probe_module finds probes/compressednames.py through the tracer runner",
    ("formats.flush_output", "model.log2_histogram"):
        "the parser returns its histograms as log2 histogram frames",
    ("run.run_folder", "analysis.traffic_phases"):
        "load_run infers the phases from traffic when the load tool has none",
    ("analysis.run_profile", "views.flamegraph"):
        "run_flamegraphs draws the report's per-phase flame graphs",
}


def module_name(path):
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name):
    rel = Path(*name.split(".")[1:]) if "." in name else Path()
    return (PKG / rel).with_suffix(".py").is_file() or (PKG / rel / "__init__.py").is_file()


def imports(path):
    """Every mongoprobe module PATH imports, at the top or inside a function."""
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("mongoprobe."))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            else:
                base = node.module or ""
            if base != "mongoprobe" and not base.startswith("mongoprobe."):
                continue
            for a in node.names:
                yield f"{base}.{a.name}" if is_module(f"{base}.{a.name}") else base


def stage(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[1] in STAGES else None


def against_the_order():
    found = set()
    for path in PKG.rglob("*.py"):
        if "_data" in path.relative_to(PKG).parts:
            continue
        me = module_name(path)
        for target in imports(path):
            if stage(me) and stage(target) and \
                    STAGES.index(stage(target)) > STAGES.index(stage(me)):
                found.add((me.removeprefix("mongoprobe."), target.removeprefix("mongoprobe.")))
    return found


def test_every_module_lives_in_its_stage_package():
    flat = {p.name for p in PKG.glob("*.py")}
    assert flat <= TOP_LEVEL, f"modules directly under mongoprobe/: {sorted(flat - TOP_LEVEL)}"
    packages = {d.name for d in PKG.iterdir() if (d / "__init__.py").is_file()}
    assert packages == set(STAGES)


def test_the_package_docstring_names_every_stage():
    doc = ast.get_docstring(ast.parse((PKG / "__init__.py").read_text()))
    for s in STAGES:
        assert f"\n    {s}/" in doc, s


def test_imports_follow_the_stage_order():
    found = against_the_order()
    new = found - set(KNOWN)
    gone = set(KNOWN) - found
    assert not new, f"imports from a later stage: {sorted(new)}"
    assert not gone, f"gone (remove them from KNOWN): {sorted(gone)}"
