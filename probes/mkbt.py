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
    %%if !tls ...lines... %%endif                    ... or in the tools without a tag

A tool's name is its tags joined by "+": mongo_latency_tls.bt is "latency+tls",
the latency tool with its TLS section (uprobes on OpenSSL; the library's path is
its 4th argument), so `%%if latency` keeps lines in both latency tools and
`%%if tls` in the TLS ones only (dtrace/mongo_time_tls.d is "time+tls").

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
                                "latency+tls": HERE / "mongo_latency_tls.bt",
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
    top: list[str] = []
    lines = iter(template.splitlines())
    for line in lines:
        s = line.strip()
        if s.startswith("%%define "):
            name, body = s.split()[1], []
            for inner in lines:
                if inner.strip() == "%%end":
                    break
                body.append(inner)
            blocks[name] = body
        else:
            top.append(line)
    out = filter_tool(top, tool)

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


def selected(directive: str, tool: str) -> bool:
    """Whether `%%if A|B|!C` keeps its lines in tool: one of its terms holds (a tag
    of the tool's, or !TAG: a tag it lacks)."""
    tags = set(tool.split("+"))
    return any(t[1:] not in tags if t.startswith("!") else t in tags
               for t in directive.split()[1].split("|"))


def filter_tool(lines: list[str], tool: str) -> list[str]:
    keep, res = [True], []
    for line in lines:
        s = line.strip()
        if s.startswith("%%if "):
            keep.append(keep[-1] and selected(s, tool))
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
