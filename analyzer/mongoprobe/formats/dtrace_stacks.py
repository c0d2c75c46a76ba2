"""DTrace aggregated stacks (``@[ustack()] = count()``, ``stack()``) -> stack samples.

What it parses: what ``dtrace`` prints at exit for an aggregation keyed by ``stack()``
or ``ustack()`` (illumos/SmartOS, FreeBSD, macOS): a blank line, the frames leaf first
as ``module`function+0xOFFSET`` (``0xADDRESS`` when unresolved), then the count alone
on a line. Produced by, for example (from the seed report, SmartOS)::

    dtrace -n 'syscall::memcntl:entry /pid == $target/ { @[ustack()] = count(); }
               tick-60s { exit(0); }' -p `pgrep mongod`

Example input (``samples/stacks/dtrace-mongod-memcntl-ustack.txt``, trimmed)::

    CPU     ID                    FUNCTION:NAME
     13  76285                        :tick-60s

                  libc.so.1`memcntl+0xa
                  libc.so.1`msync+0xc9
                  mongod`_ZN5mongo14PosixFlushable5flushEv+0x3e
                  libc.so.1`_lwp_start
                   19

and its folded line (root first)::

    libc.so.1`_lwp_start;mongod`_ZN5mongo14PosixFlushable5flushEv;libc.so.1`msync;libc.so.1`memcntl 19

Frames are cleaned as ``inferno-collapse-dtrace`` does by default, byte for byte on the
stacks (``tests/test_stacks.py``): everything from the last ``+`` is removed; in C++
names (``::``) the part from the last ``(`` or ``<`` after the first ``::`` is cut;
partially demangled Rust symbols are fixed; ``a->b`` (inlined) becomes ``a;b_[i]``
(a leading ``L`` dropped from each); ``;`` becomes ``:``; an empty frame is ``-``. The
``module`` prefix stays (``libc.so.1`msync``). Unlike inferno, the lines dtrace prints
before the first stack (``dtrace: description ...``, the ``CPU ID FUNCTION:NAME``
header and the line of the probe that ended the trace) are skipped rather than folded
into the first stack.

Scalar keys printed above a stack (``@[tid, ustack()]``: the tid alone on a line, then
the frames) are read as one integer -> ``tid``, two -> ``pid, tid``; a word -> ``comm``.
DTrace aggregations carry no time: ``time`` is NaN; ``count`` and ``weight`` are the
aggregation's value.

``dtrace/profile.d`` prints its entries in ``printa("@[%d, %d, %s, %k, %k]: %@d\n")``
form, the layout of probes/profile.bt's map print with DTrace's frames::

    # profile.d pid=4127 tid=0 hz=97
    @[2, 4131, ferretdb,
    vmlinux`do_sched_yield+0x71
    vmlinux`entry_SYSCALL_64_after_hwframe+0x76
    ,
    ferretdb`runtime.osyield.abi0+0x7
    ferretdb`runtime.mstart.abi0+0xc
    ]: 1

These are read too: the keys are SECOND (-> ``time``, seconds since the start),
TID and EXECNAME (-> ``comm``), ``pid`` comes from the ``# profile.d pid=N`` line; the
kernel stack then the user stack, each leaf first, fold user root first and kernel to
the leaf (as DTrace's default layout of ``@[stack(), ustack()]`` does). Input that ends inside a stack, or a line inside a stack that is
neither a frame (``module`func``, ``0xADDR``) nor the count, raises
:class:`FormatError` naming the file and line.
"""

from __future__ import annotations

import math
import re
from typing import IO, Iterator

from .errors import FormatError
from .symbols import fix_rust_symbol

NAME = "dtrace"

Sample = tuple  # (time, pid, tid, comm, frames, count, weight)

_COUNT = re.compile(r"\d+$")
_HEXADDR = re.compile(r"0x[0-9a-fA-F]+$")
_HEADER = re.compile(r"CPU\s+ID\s+FUNCTION:NAME$")
_PROBE_LINE = re.compile(r"\d+\s+\d+\s+\S*:\S+$")
_AT_HEAD = re.compile(r"^@\[(.*?),?$")        # profile.d: "@[SECOND, TID, EXECNAME,"
_AT_END = re.compile(r"^\]: (\d+)$")
_TOOL_PID = re.compile(r"^# \S+\.d pid=(\d+)")


def is_format(head: str) -> bool:
    """inferno's check: after a blank line, frame lines (with a backquote, or a hex
    address), then a count. A line that is neither, after a frame, still says DTrace
    (the parser then names that line as damaged). Or profile.d's ``@[...`` entries
    holding DTrace frames (``module`function+0xOFF``) and ending in ``]: N``."""
    if (re.search(r"(?m)^@\[", head) and re.search(r"(?m)^\]: \d+$", head)
            and re.search(r"(?m)^[^\s`]+`\S*\+0x[0-9a-f]+$", head)):
        return True
    after_blank = found_frame = False
    for line in head.splitlines()[:400]:
        line = line.strip()
        if not line:
            after_blank = True
        elif after_blank:
            if _COUNT.match(line):
                return found_frame
            if "`" in line or _HEXADDR.match(line):
                found_frame = True
            else:
                return found_frame
    return False


def uncpp(probe: str) -> str:
    scope = probe.find("::")
    if scope < 0:
        return probe
    rest = probe[scope + 2:]
    cut = max(rest.rfind("("), rest.rfind("<"))
    return probe[:scope + 2 + cut] if cut >= 0 else probe


def clean_frame(line: str) -> list[str]:
    """One stripped frame line -> the folded frame(s), root-side first."""
    plus = line.rfind("+")
    frame = line[:plus] if plus >= 0 else line
    if "::" in line:
        frame = uncpp(frame)
    if not frame:
        frame = "-"
    else:
        mod, tick, func = frame.partition("`")
        if tick:
            fixed = fix_rust_symbol(func.rstrip())
            if fixed != func.rstrip():
                frame = mod + "`" + fixed
    if "->" in line:
        out = []
        for i, func in enumerate(frame.split("->")):
            func = func.lstrip("L").replace(";", ":")
            out.append(func + "_[i]" if i else func)
        return out
    return [frame.replace(";", ":")]


def read(fh: IO, source: str = "<dtrace>", stats: dict | None = None) -> Iterator[Sample]:
    """Samples of a DTrace aggregation of stacks, streamed."""
    st = stats if stats is not None else {}
    st.update({"stacks": 0, "samples": 0})
    keys: list[str] = []
    stack: list[str] = []
    started = False          # past the header lines dtrace prints before the stacks
    start_line = 0
    cache: dict[str, list[str]] = {}
    n = 0
    at_keys: list[str] | None = None      # inside a profile.d "@[...]: N" entry
    tool_pid = -1
    for n, raw in enumerate(fh, 1):
        line = (raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw).strip()
        if at_keys is None and not stack and (m := _TOOL_PID.match(line)):
            tool_pid = int(m[1])
            continue
        if at_keys is None and not stack and line.startswith("@["):
            at_keys = [k.strip() for k in _AT_HEAD.match(line)[1].split(",") if k.strip()]
            keys, start_line = [], n      # a banner line read as a key is not one
            continue
        if at_keys is not None:
            if line == ",":
                continue
            if m := _AT_END.match(line):
                ints = [int(k) for k in at_keys if _COUNT.match(k)]
                words = [k for k in at_keys if not _COUNT.match(k)]
                t = float(ints[0]) if len(ints) >= 2 else math.nan
                tid = ints[-1] if ints else -1
                stack.reverse()
                value = int(m[1])
                st["stacks"] += 1
                st["samples"] += value
                started = True
                yield (t, tool_pid, tid, words[0] if words else "", ";".join(stack), value,
                       value)
                at_keys, stack, start_line = None, [], 0
                continue
            if "`" in line or _HEXADDR.match(line):
                got = cache.get(line)
                if got is None:
                    got = cache[line] = clean_frame(line)
                stack.append(";".join(got) if len(got) > 1 else got[0])
                continue
            raise FormatError(source, n, "a stack frame 'module`function+0xOFFSET', ',' or "
                              "']: COUNT' in the entry begun on line " + str(start_line), line)
        if line.startswith("@samples_total:"):
            continue
        if not line:
            started = started or bool(stack or keys)
            if keys and not stack:
                keys = []
            continue
        if not started and not stack and not keys and (
                line.startswith("dtrace:") or _HEADER.match(line) or _PROBE_LINE.match(line)):
            continue
        if _COUNT.match(line):
            if not stack:
                keys.append(line)
                start_line = start_line or n
                continue
            pid = tid = -1
            comm = ""
            ints = [int(k) for k in keys if _COUNT.match(k)]
            words = [k for k in keys if not _COUNT.match(k)]
            if len(ints) == 1:
                tid = ints[0]
            elif len(ints) >= 2:
                pid, tid = ints[0], ints[1]
            if words:
                comm = words[0]
            stack.reverse()
            value = int(line)
            st["stacks"] += 1
            st["samples"] += value
            started = True
            yield (math.nan, pid, tid, comm, ";".join(stack), value, value)
            keys, stack, start_line = [], [], 0
            continue
        if "`" in line or _HEXADDR.match(line):
            got = cache.get(line)
            if got is None:
                got = cache[line] = clean_frame(line)
                if len(cache) > 100_000:
                    cache.clear()
            stack.append(";".join(got) if len(got) > 1 else got[0])
            start_line = start_line or n
        elif not stack:
            keys.append(line)           # a scalar key above the stack (execname ...)
            start_line = start_line or n
        else:
            raise FormatError(source, n, "a stack frame 'module`function+0xOFFSET' or the "
                              "count", line)
    if stack or at_keys is not None:
        raise FormatError(source, n, f"the count of the stack begun on line {start_line}; "
                          "the input ends inside it")


def no_ustack_weight(lines) -> int:
    """Samples of profile.d's entries whose user stack (after the "," line) is empty."""
    n, frames, after = 0, 0, False
    for line in lines:
        s = line.strip()
        if s.startswith("@["):
            frames, after = 0, False
        elif s == ",":
            after = True
        elif m := re.match(r"^\]: (\d+)$", s):
            n += int(m[1]) if after and frames == 0 else 0
            after = False
        elif after and s:
            frames += 1
    return n
