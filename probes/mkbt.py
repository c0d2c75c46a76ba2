#!/usr/bin/env python3
"""mkbt.py - generate the wire-protocol tools (bpftrace and D) from their templates.

USAGE: probes/mkbt.py [--check]

mongo_latency.bt and mongo_snoop.bt share their per-connection state machine
(probes/README.md), and so do dtrace/mongo_time.d and dtrace/mongo_snoop.d.
Neither language has functions or includes a standalone script can rely on, so
the shared parts live once in probes/mongo_wire.bt.in and dtrace/mongo_wire.d.in
and this script expands them:

    %%define NAME      ...lines...      %%end      define a block
    %%NAME%%                                        expand a block (indented as the use)
    %%if latency|snoop ...lines... %%endif           keep the lines in one tool only

A tool's name may carry features after "+" ("time+tls": the tool "time" with the
feature "tls"): %%if keeps its lines when the tool or any of its features is named.

The generated files are committed so each tool runs on its own; tests run
`mkbt.py --check` so they never drift from the template.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# template -> the tools made from it (a tool's name selects its %%if blocks)
TARGETS = {
    HERE / "mongo_wire.bt.in": {"latency": HERE / "mongo_latency.bt",
                                "snoop": HERE / "mongo_snoop.bt"},
    HERE.parent / "dtrace" / "mongo_wire.d.in": {
        "time": HERE.parent / "dtrace" / "mongo_time.d",
        "snoop": HERE.parent / "dtrace" / "mongo_snoop.d",
        # the same with OpenSSL's SSL_read/SSL_write through the pid provider
        "time+tls": HERE.parent / "dtrace" / "mongo_time_tls.d",
        "snoop+tls": HERE.parent / "dtrace" / "mongo_snoop_tls.d"},
}
USE = re.compile(r"^(\s*)%%([A-Z_]+)%%\s*$")


def expand(template: str, tool: str) -> str:
    blocks: dict[str, list[str]] = {}
    out: list[str] = []
    lines = iter(template.splitlines())
    keep = [True]
    for line in lines:
        s = line.strip()
        if s.startswith("%%define "):
            name, body = s.split()[1], []
            for inner in lines:
                if inner.strip() == "%%end":
                    break
                body.append(inner)
            blocks[name] = body
        elif s.startswith("%%if "):
            keep.append(keep[-1] and selects(s, tool))
        elif s == "%%endif":
            keep.pop()
        elif keep[-1]:
            out.append(line)

    def subst(seq: list[str], depth: int = 0) -> list[str]:
        res = []
        for line in seq:
            m = USE.match(line)
            if not m:
                res.append(line)
                continue
            if depth > 5 or m[2] not in blocks:
                raise SystemExit(f"mkbt: unknown or recursive block {m[2]}")
            body = subst(filter_tool(blocks[m[2]], tool), depth + 1)
            base = min((len(b) - len(b.lstrip()) for b in body if b.strip()), default=0)
            res.extend(m[1] + b[base:] if b.strip() else "" for b in body)
        return res

    return "\n".join(subst(out)) + "\n"


def selects(directive: str, tool: str) -> bool:
    """Does "%%if a|b" keep its lines in tool ("name" or "name+feature+...")?"""
    return bool(set(tool.split("+")) & set(directive.split()[1].split("|")))


def filter_tool(lines: list[str], tool: str) -> list[str]:
    keep, res = [True], []
    for line in lines:
        s = line.strip()
        if s.startswith("%%if "):
            keep.append(keep[-1] and selects(s, tool))
        elif s == "%%endif":
            keep.pop()
        elif keep[-1]:
            res.append(line)
    return res


def main(argv: list[str]) -> int:
    stale = []
    for tpl, tools in TARGETS.items():
        template = tpl.read_text()
        for tool, path in tools.items():
            text = expand(template, tool)
            if "--check" in argv:
                if not path.exists() or path.read_text() != text:
                    stale.append(path.name)
            else:
                path.write_text(text)
                path.chmod(0o755)
    if stale:
        print(f"mkbt: {', '.join(stale)} out of date: run probes/mkbt.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
