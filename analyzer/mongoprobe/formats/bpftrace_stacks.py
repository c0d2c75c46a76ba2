"""bpftrace stack maps (``@[..., kstack, ustack] = count()``) -> stack samples.

What it parses: the maps bpftrace prints at exit (or with ``print(@)``) when their key
holds stacks, in both of bpftrace's output forms -- text, and ``-f json`` -- such as
``probes/profile.bt`` and ``probes/offcpu.bt`` write. Produced by, for example::

    BPFTRACE_CACHE_USER_SYMBOLS=1 bpftrace -e 'profile:hz:99 /pid == 4127/
        { @[elapsed / 1000000000, tid, comm, kstack, ustack] = count(); }'

Example input (text form, one entry, trimmed; real ones of both forms: ``samples/stacks/``)::

    @[2, 12806, ferretdb,
        _raw_spin_unlock_irq+17
        asm_sysvec_apic_timer_interrupt+22
    ,
        encoding/json.stateEndValue+141
        runtime.goexit.abi0+1
    ]: 1

and its folded line (user stack from its root, then the kernel stack down to the leaf;
the comm as the root frame)::

    ferretdb;runtime.goexit.abi0;encoding/json.stateEndValue;asm_sysvec_apic_timer_interrupt;_raw_spin_unlock_irq 1

The ``-f json`` form prints the same map as ``{"type": "map", "data": {"@": {"2,12806,
ferretdb,\\n    _raw_spin...\\n,\\n    encoding/json...\\n": 1}}}``.

Key fields. A stack field is one that spans lines (or is empty where a stack is
expected); the fields before the first stack are scalars. What each field is comes
from a ``# keys: NAME,NAME,...`` line the script printed (``printf`` in BEGIN), with
names ``time_s`` ``time_ms`` ``time_us`` ``time_ns`` ``pid`` ``tid`` ``comm``
``kstack`` ``ustack`` (anything else is ignored). Without one: integer scalars are
``tid`` (one), ``time_s, tid`` (two, profile.bt's layout), ``time_s, pid, tid``
(three); the first other scalar is ``comm``; each stack is told kernel or user by its
content (:func:`is_kernel_stack`: a kernel stack ends at an entry point such as
``entry_SYSCALL_64_after_hwframe``, ``asm_sysvec_*``, ``asm_exc_*``,
``ret_from_fork*``, or holds kernel addresses), so ``@[ustack, kstack]``,
``@[kstack, ustack]``, ``@[kstack]``, ``@[ustack]`` and ``@[comm, kstack, ustack]``
all fold user root first, kernel to the leaf. Two stacks that cannot be told apart
by content (a kernel stack cut short before its entry point) take the order an earlier
entry of the same map showed (a map's keys are all in one order), else
``kstack, ustack``. ``pid`` also comes from a ``# TOOL pid=N ...`` line when the key has
none (profile.bt and offcpu.bt print one).

Per-sample time: bpftrace prints aggregated maps, not samples, so ``time`` is the time
key at the key's resolution (seconds for ``time_s``: every sample of that second is
placed at its start), in the script's time base: seconds since bpftrace started when
the key is ``elapsed / N`` (the ``# clock monotonic_ns=N elapsed_ns=M`` line maps it to
CLOCK_MONOTONIC: ``monotonic_ns = N - M + time * 1e9``). For a sub-second heat map,
key by ``elapsed / 1000000`` and print ``# keys: time_ms,...``. No time key: NaN.

Frames: bpftrace's ``sym+OFFSET`` loses its offset; ``0xADDR`` (unresolved) becomes
``[unknown]``; ``ustack(perf)`` lines ``ADDR sym+0xOFF (module)`` are read too. Names
are then cleaned as ``inferno-collapse-perf`` cleans them (``symbols.tidy_generic``,
Rust symbols fixed), so one function has one name in perf and bpftrace profiles.

Counts: ``count`` and ``weight`` are the map's value (a sample count for ``count()``;
for ``sum()`` maps, e.g. offcpu.bt's microseconds -- its ``# offcpu.bt ... unit=us``
line is kept in ``meta["unit"]`` -- both are that sum). Entries whose stacks are both
empty (bpftrace could not read them: a stack-map collision) are not folded; their
value is counted in ``stats["empty"]``. Each printed entry adds: a script printing a
map several times without ``clear()`` is counted several times.

Scalar maps (``@samples_total: 5120``) are kept in ``meta["scalars"]``; histograms and
other printed lines are skipped. A map entry that is cut short or whose key cannot be
split raises :class:`FormatError` naming the file and line.
"""

from __future__ import annotations

import math
import re
from typing import IO, Iterable, Iterator

from . import bpftrace_json
from .bpftrace_json import unescape_key
from .errors import FormatError
from .symbols import fix_rust_symbol, tidy_generic

NAME = "bpftrace"

Sample = tuple  # (time, pid, tid, comm, frames, count, weight)

_ENTRY = re.compile(r"@(\w*)\[")
_END = re.compile(r"\]: (-?\d+)$")
# The last stack of the key came back empty (a failed stack lookup): ", ]: N".
_END_EMPTY = re.compile(r", \]: (-?\d+)$")
_ONE_LINE = re.compile(r"@(\w*)\[(.*)\]: (-?\d+)$")
_SCALAR = re.compile(r"@(\w*): (-?\d+)$")
_KEYS = re.compile(r"# keys: *(\S+)")
_CLOCK = re.compile(r"# clock monotonic_ns=(\d+) elapsed_ns=(\d+)")
_PIDLINE = re.compile(r"# \S+ .*\bpid=(\d+)")
_UNIT = re.compile(r"\bunit=(\w+)")
_INT = re.compile(r"-?\d+$")
_OFFSET = re.compile(r"\+(?:0x[0-9a-fA-F]+|\d+)$")
_PERF_FRAME = re.compile(r"([0-9a-fA-F]+) (.*) \((.*)\)$")
_ADDR = re.compile(r"0x[0-9a-fA-F]+$")

_TIME_UNITS = {"time_s": 1.0, "time_ms": 1e-3, "time_us": 1e-6, "time_ns": 1e-9}


_DTRACE_FRAME = re.compile(r"(?m)^[^\s`]+`\S*\+0x[0-9a-f]+$")


def is_format(head: str) -> bool:
    """A map entry with a multi-line (stack) key, in the text or the JSON form."""
    s = head.lstrip()
    if s.startswith('{"type"'):
        # a map whose keys hold stacks: "...,\n    frame" (bpftrace 0.17), "\\n" (0.23,
        # escaped twice), unindented frames (0.27)
        return '"type": "map"' in head and bool(re.search(r',\\{1,2}n', head))
    # profile.bt and offcpu.bt name their keys first: an output of theirs without a
    # map (nothing sampled, or off-CPU over the threshold) is an empty one, not another
    # format
    if re.search(r"(?m)^# keys: [\w,]*\b[ku]stack\b", head):
        return True
    # dtrace/profile.d prints the same entry shape with DTrace's frames, unindented
    # ("module`function+0xOFF"): that is formats.dtrace_stacks'
    return bool(re.search(r"(?m)^@\w*\[", head)) and bool(
        re.search(r"(?m)^\]: -?\d+$", head)) and not _DTRACE_FRAME.search(head)


# --- keys ---------------------------------------------------------------------------------


def split_key(key: str, sep: str) -> list[str] | None:
    """The fields of a printed key. Stack fields keep their newlines (``"\\n  f\\n"``);
    ``sep`` is ``", "`` (text) or ``","`` (JSON). None when it cannot be split."""
    fields: list[str] = []
    pos, n = 0, len(key)
    stack_end = "\n" + sep
    while pos < n:
        if key[pos] == "\n":
            # from pos itself: bpftrace 0.23+ prints an empty stack as a lone "\n"
            end = key.find(stack_end, pos)
            if end < 0:
                fields.append(key[pos:])
                return fields
            fields.append(key[pos:end + 1])
            pos = end + 1 + len(sep)
            if pos >= n:
                fields.append("")
        else:
            end = key.find(sep, pos)
            nl = key.find("\n", pos)
            if nl >= 0 and (end < 0 or nl < end):
                return None            # a scalar running into a stack without a separator
            if end < 0:
                fields.append(key[pos:])
                return fields
            fields.append(key[pos:end])
            pos = end + len(sep)
            if pos >= n:
                fields.append("")
    return fields


def _roles(fields: list[str], names: list[str] | None,
           order: list[str] | None = None) -> tuple[list[str], list[str] | None]:
    """Each field's role, and the order of two stacks when their content told it
    (``order``: the one an earlier entry of the same map told, for entries whose two
    stacks look alike, such as a kernel stack cut short before its entry point)."""
    if names is not None:
        return (names + ["-"] * len(fields))[:len(fields)], None
    # Scalars: leading fields that are neither empty nor multi-line.
    k = 0
    while k < len(fields) and fields[k] and "\n" not in fields[k]:
        k += 1
    scalars, nstacks = fields[:k], len(fields) - k
    ints = [i for i, f in enumerate(scalars) if _INT.match(f)]
    int_roles = {1: ["tid"], 2: ["time_s", "tid"], 3: ["time_s", "pid", "tid"]}.get(
        len(ints), ["time_s", "pid", "tid"] + ["-"] * max(0, len(ints) - 3))
    roles = ["-"] * len(fields)
    for i, r in zip(ints, int_roles):
        roles[i] = r
    others = [i for i in range(k) if i not in ints]
    if others:
        roles[others[0]] = "comm"
    stacks = fields[k:]
    kernel = [is_kernel_stack(f) for f in stacks]
    told = None
    if nstacks == 1:
        stack_roles = ["kstack" if kernel[0] else "ustack"]
    elif nstacks == 2 and kernel[0] != kernel[1]:
        stack_roles = told = ["kstack", "ustack"] if kernel[0] else ["ustack", "kstack"]
    elif nstacks == 2 and order is not None:
        stack_roles = order
    elif nstacks == 2 and not any(kernel) and bool(stacks[0].strip()) != bool(stacks[1].strip()):
        # a sample taken in user mode has an empty kernel stack: the other one is the user's
        stack_roles = ["ustack", "kstack"] if stacks[0].strip() else ["kstack", "ustack"]
    else:
        stack_roles = ["kstack", "ustack"]
    for j in range(k, len(fields)):
        roles[j] = stack_roles[j - k] if j - k < len(stack_roles) else "-"
    return roles, told


# Frames only a kernel stack ends at (its root, printed last): syscall and interrupt
# entry, exceptions, new threads, the idle loop's start.
_KERNEL_ROOT = re.compile(
    r"(entry_SYSCALL_64|entry_SYSENTER|entry_INT80|asm_exc_|asm_sysvec_|asm_common_interrupt"
    r"|asm_spurious|ret_from_fork|secondary_startup_64|common_startup_64|start_kernel"
    r"|do_syscall_64|x64_sys_call|__x64_sys_|__arm64_sys_|el0t_64_|el0_svc)")
_KERNEL_ADDR = re.compile(r"0xffff[0-9a-f]{12}$")


def is_kernel_stack(field: str) -> bool:
    """Whether a printed stack (frames one per line, leaf first) is a kernel stack:
    one of its frames is a kernel entry point or a kernel address. Position in the
    key does not say it: ``@[ustack, kstack]`` is as valid as ``@[kstack, ustack]``."""
    for line in field.split("\n"):
        f = line.strip()
        if not f:
            continue
        m = _PERF_FRAME.match(f)
        if m:
            f = m.group(2) if m.group(3) != "[kernel.kallsyms]" else "entry_SYSCALL_64"
        if _KERNEL_ROOT.match(f) or _KERNEL_ADDR.match(f.split("+")[0]):
            return True
    return False


def frame_name(line: str) -> str | None:
    """One printed frame -> its cleaned name; None for a blank line."""
    f = line.strip()
    if not f:
        return None
    m = _PERF_FRAME.match(f)
    if m:
        f, module = m.group(2), m.group(3)
        if f == "[unknown]" and module != "[unknown]":
            f = "[" + module[module.rfind("/") + 1:] + "]"
    if _ADDR.match(f):
        return "[unknown]"
    f = _OFFSET.sub("", f)
    return tidy_generic(fix_rust_symbol(f))


# --- the parser ---------------------------------------------------------------------------


class _Reader:
    def __init__(self, source: str, stats: dict, meta: dict):
        self.source, self.stats, self.meta = source, stats, meta
        self.names: list[str] | None = None
        self.frame_cache: dict[str, str | None] = {}
        self.stack_cache: dict[str, list[str]] = {}
        self.order: dict[str, list[str]] = {}     # map name -> its two stacks' order

    def comment(self, line: str) -> None:
        m = _KEYS.match(line)
        if m:
            self.names = [x.strip() for x in m.group(1).split(",")]
            self.meta["keys"] = self.names
            return
        m = _CLOCK.match(line)
        if m:
            self.meta["clock"] = (int(m.group(1)), int(m.group(2)))
            return
        m = _PIDLINE.match(line)
        if m:
            self.meta.setdefault("pid", int(m.group(1)))
            u = _UNIT.search(line)
            if u:
                self.meta["unit"] = u.group(1)

    def frames(self, field: str, lineno: int, per_line: bool) -> list[str]:
        """A stack field (leaf first) -> frames root first. ``lineno``: the line the
        field starts on (its first frame is on the next); ``per_line`` False when the
        whole field is on one input line (JSON)."""
        got = self.stack_cache.get(field)
        if got is not None:
            return got
        out = []
        for i, line in enumerate(field.split("\n")):
            # (bpftrace 0.27's JSON keys hold the frames unindented)
            if per_line and line and not line[0].isspace():
                raise FormatError(self.source, lineno + i * per_line,
                                  "an indented stack frame", line)
            name = self.frame_cache.get(line, False)
            if name is False:
                name = self.frame_cache[line] = frame_name(line)
            if name is not None:
                out.append(name)
        out.reverse()
        if len(self.stack_cache) > 100_000:
            self.stack_cache.clear()
        self.stack_cache[field] = out
        return out

    def entry(self, mapname: str, key: str, value: int, sep: str, lineno: int
              ) -> Sample | None:
        per_line = sep == ", "
        fields = split_key(key, sep)
        if fields is None:
            raise FormatError(self.source, lineno, "a map key 'SCALAR, ..., STACK'", key)
        roles, told = _roles(fields, self.names, self.order.get(mapname))
        if told is not None:
            self.order.setdefault(mapname, told)
        t = math.nan
        pid, tid, comm = self.meta.get("pid", -1), -1, ""
        kstack: list[str] = []
        ustack: list[str] = []
        line = lineno
        for f, r in zip(fields, roles):
            if r in _TIME_UNITS:
                if not _INT.match(f):
                    raise FormatError(self.source, lineno, f"an integer {r} key", f)
                t = int(f) * _TIME_UNITS[r]
            elif r in ("pid", "tid"):
                if not _INT.match(f):
                    raise FormatError(self.source, lineno, f"an integer {r} key", f)
                if r == "pid":
                    pid = int(f)
                else:
                    tid = int(f)
            elif r == "comm":
                comm = f
            elif r == "kstack":
                kstack = self.frames(f, line, per_line) if f else []
            elif r == "ustack":
                ustack = self.frames(f, line, per_line) if f else []
            if per_line:
                line += f.count("\n")
        self.meta.setdefault("maps", [])
        if mapname not in self.meta["maps"]:
            self.meta["maps"].append(mapname)
        if not kstack and not ustack:
            self.stats["empty"] += value
            return None
        self.stats["entries"] += 1
        self.stats["samples"] += value
        return (t, pid, tid, comm, ";".join(ustack + kstack), value, value)

    # -- text ----------------------------------------------------------------------
    def text(self, lines: Iterable[str]) -> Iterator[Sample]:
        entry: list[str] | None = None
        mapname, start, skip_block = "", 0, False
        n = 0
        for n, raw in enumerate(lines, 1):
            line = raw.rstrip("\r\n")
            if entry is not None:
                if line[:1] == " ":     # a frame (most lines): no end or new entry
                    entry.append(line)
                    continue
                m = _END.match(line)
                if not m:
                    m = _END_EMPTY.match(line)
                    if m:
                        entry.append(", ")
                if m:
                    key = "\n".join(entry) + "\n"
                    s = self.entry(mapname, key, int(m.group(1)), ", ", start)
                    entry = None
                    if s is not None:
                        yield s
                elif line.startswith("@"):
                    raise FormatError(self.source, n, "the end of the map entry begun on "
                                      f"line {start} (']: COUNT')", line)
                else:
                    # Tools that strip trailing blanks leave "," for the ", " separator.
                    entry.append(", " if line == "," else line)
                continue
            if skip_block:
                skip_block = bool(line.strip())
                continue
            if line.startswith("#"):
                self.comment(line)
                continue
            if not line.startswith("@"):
                continue
            m = _ONE_LINE.match(line)
            if m:
                s = self.entry(m.group(1), m.group(2), int(m.group(3)), ", ", n)
                if s is not None:
                    yield s
                continue
            m = _SCALAR.match(line)
            if m:
                self.meta.setdefault("scalars", {})[m.group(1)] = int(m.group(2))
                continue
            m = _ENTRY.match(line)
            if m and not line.rstrip().endswith(":"):
                mapname, start = m.group(1), n
                first = line[m.end():]
                entry = [first + " " if first.endswith(",") else first]
                continue
            skip_block = True       # a histogram or another map shape: up to a blank line
        if entry is not None:
            raise FormatError(self.source, n, f"the end of the map entry begun on line "
                              f"{start} (']: COUNT'); the input ends inside it")

    # -- JSON ----------------------------------------------------------------------
    def json_lines(self, lines: Iterable[str]) -> Iterator[Sample]:
        def printf(text: str, rec) -> None:
            for t in text.splitlines():
                if t.startswith("#"):
                    self.comment(t)

        def a_map(name: str, m, rec):
            if not isinstance(m, dict):
                self.meta.setdefault("scalars", {})[name.lstrip("@")] = m
                return None
            return self._json_entries(name.lstrip("@"), m, rec)

        yield from bpftrace_json.read(lines, self.source, {"printf": printf, "map": a_map})

    def _json_entries(self, mapname: str, m: dict, rec) -> Iterator[Sample]:
        for key, value in m.items():
            if not isinstance(value, int):
                raise FormatError(rec.source, rec.lineno, "an integer map value", repr(value))
            s = self.entry(mapname, unescape_key(key), value, ",", rec.lineno)
            if s is not None:
                yield s


def read(fh: IO, source: str = "<bpftrace>", stats: dict | None = None,
         meta: dict | None = None) -> Iterator[Sample]:
    """Samples of a bpftrace stack-map output (text or ``-f json``), streamed.
    ``stats`` gets entries, samples, empty; ``meta`` gets clock, pid, unit, keys,
    maps, scalars when the output has them."""
    st = stats if stats is not None else {}
    st.update({"entries": 0, "samples": 0, "empty": 0})
    reader = _Reader(source, st, meta if meta is not None else {})
    lines = _text_lines(fh)
    first = next(lines, None)
    if first is None:
        return
    import itertools
    lines = itertools.chain([first], lines)
    if first.lstrip().startswith('{"type"'):
        yield from reader.json_lines(lines)
    else:
        yield from reader.text(lines)


def lookup_failures(stderr_lines: Iterable[str]) -> int:
    """Stacks bpftrace could not print: 0.17 writes one "failed to look up stack id"
    line to stderr per lost stack (a stack-map collision or a full stack map)."""
    return sum(1 for ln in stderr_lines if "failed to look up stack id" in ln)


def _text_lines(fh: IO) -> Iterator[str]:
    for line in fh:
        yield line.decode("utf-8", "replace") if isinstance(line, bytes) else line


def tally(lines) -> dict:
    """Count what a profile.bt/offcpu.bt print holds, without folding it.

    ``{"entries", "weight" (sum of the @[...] values), "no_ustack" (weight of entries
    whose user stack is empty: stack-map collisions or failed walks), "total"
    (what the values add up to unless lost: @samples_total, or offcpu.bt's
    @offcpu_us_total, else @switches_total, a count of switches of older
    outputs; None when absent), "seconds", "tids"}``.
    A check for ``mongoprobe profile``'s summary line; the stack parser is :func:`read`.
    """
    entries = weight = no_ustack = 0
    totals: dict[str, int] = {}
    seconds, tids = set(), set()
    head = None          # header line of the entry being read
    after_sep = False    # between kstack and ustack, or no kstack
    ustack_frames = 0
    hdr = re.compile(r"^@\[(\d+), (\d+), ")
    for raw in lines:
        line = raw.rstrip("\n")
        if head is None:
            m = hdr.match(line)
            if m:
                seconds.add(int(m[1]))
                tids.add(int(m[2]))
                one = re.search(r"\]: (\d+)$", line)
                if one:      # both stacks empty: "@[3, 123, comm, , ]: 2"
                    entries += 1
                    weight += int(one[1])
                    no_ustack += int(one[1])
                    continue
                head, ustack_frames = line, 0
                after_sep = line.rstrip().endswith(", ,") or line.endswith(", , ")
                continue
            t = re.match(r"^@(samples_total|offcpu_us_total|switches_total): (\d+)$", line)
            if t:
                totals[t[1]] = int(t[2])
            continue
        s = line.strip()
        # "]: N" ends an entry; ", ]: N" ends one whose kernel stack is followed by
        # an empty user stack (an interrupt's sample)
        end = re.match(r"^(?:,\s*)?\]: (\d+)$", s)
        if end:
            entries += 1
            weight += int(end[1])
            if ustack_frames == 0:
                no_ustack += int(end[1])
            head = None
        elif s == ",":
            after_sep = True
        elif s and after_sep:
            ustack_frames += 1
    total = next((totals[k] for k in ("samples_total", "offcpu_us_total", "switches_total")
                  if k in totals), None)
    return {"entries": entries, "weight": weight, "no_ustack": no_ustack, "total": total,
            "seconds": len(seconds), "tids": len(tids)}
