"""Function names as inferno's collapsers clean them, for every stack format
(``perf_script``, ``bpftrace_stacks``, ``dtrace_stacks``): partially demangled Rust
symbols restored, argument lists cut.
"""

from __future__ import annotations

_RUST_HASH_LEN = 17
_RUST_ESC = (("$SP$", "@"), ("$BP$", "*"), ("$RF$", "&"), ("$LT$", "<"), ("$GT$", ">"),
             ("$LP$", "("), ("$RP$", ")"), ("$C$", ","), ("$u7e$", "~"), ("$u20$", " "),
             ("$u27$", "'"), ("$u3d$", "="), ("$u5b$", "["), ("$u5d$", "]"),
             ("$u7b$", "{"), ("$u7d$", "}"), ("$u3b$", ";"), ("$u2b$", "+"),
             ("$u21$", "!"), ("$u22$", '"'))
HEX = frozenset("0123456789abcdefABCDEF")


def fix_rust_symbol(sym: str) -> str:
    """Partially demangled Rust symbols (``..``, ``$LT$``, trailing ``::h<16 hex>``)."""
    tail = sym[-_RUST_HASH_LEN:]
    if len(sym) < _RUST_HASH_LEN or tail[0] != "h" or not all(c in HEX for c in tail[1:]):
        return sym
    rest = sym[:-_RUST_HASH_LEN]
    if rest.endswith("::"):
        rest = rest[:-2]
    if rest.startswith("_$"):
        rest = rest[1:]
    out = []
    while rest:
        if rest[0] == ".":
            if rest[1:2] == ".":
                out.append("::")
                rest = rest[2:]
            else:
                out.append(".")
                rest = rest[1:]
        elif rest[0] == "$":
            for pat, rep in _RUST_ESC:
                if rest.startswith(pat):
                    out.append(rep)
                    rest = rest[len(pat):]
                    break
            else:
                out.append(rest)
                break
        else:
            i = 0
            while i < len(rest) and rest[i] not in "$.":
                i += 1
            out.append(rest[:i])
            rest = rest[i:]
    return "".join(out)


def tidy_generic(func: str) -> str:
    """``;`` -> ``:``, and cut the argument list at the first top-level ``(`` unless it
    follows a ``.`` (Go: ``pkg.(*T).M``) or opens ``(anonymous namespace)``."""
    func = func.replace(";", ":")
    if "(" not in func:
        return func
    depth = 0
    last_dot = -1
    for idx, c in enumerate(func):
        if c in "<{[":
            depth += 1
        elif c in ">}])":
            depth -= 1
        elif c == "(":
            if depth == 0 and last_dot != idx and not func.startswith(
                    "(anonymous namespace)", idx):
                return func[:idx]
            depth += 1
        elif c == ".":
            last_dot = idx + 1
    return func
