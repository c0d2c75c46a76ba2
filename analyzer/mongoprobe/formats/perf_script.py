"""``perf script`` output -> stack samples, folded exactly as ``inferno-collapse-perf``.

What it parses: the text ``perf script`` prints for a ``perf record -g`` profile, one
event line per sample followed by its call chain (leaf first), a blank line between
samples. Produced by, for example::

    perf record -F 99 -g -p PID -o perf.data -- sleep 10
    perf script -i perf.data > out.perf

Example input (``samples/stacks/perf-ferretdb-small.txt``, one sample, trimmed)::

    ferretdb   11880  2613.402191:   10563520 cycles:
    \tffffffff8141f7a4 futex_wake+0x94 ([kernel.kallsyms])
    \t           96163 runtime.futex.abi0+0x23 (/root/.cache/.../ferretdb)
    \t           5c36a runtime.startm+0x18a (/root/.cache/.../ferretdb)

and its folded line (``mongoprobe fold``; root first, the comm as the root frame)::

    ferretdb;runtime.startm;runtime.futex.abi0;futex_wake 10563520

Folding follows inferno 0.12.8's ``collapse-perf`` with its default options, byte for
byte (``tests/test_stacks.py`` checks it on the real samples):

* the root frame is the comm with spaces made ``_``; no pid or tid (``--pid``/``--tid``
  off), no ``_[k]``/``_[j]`` annotations, no addresses;
* a function's ``+0xOFFSET`` is removed; frames whose symbol starts with ``(`` are
  dropped; ``[unknown]`` symbols become ``[module basename]`` (``[unknown]`` when the
  module is unknown too); partially demangled Rust symbols are fixed; ``a->b`` (inlined
  frames) become ``a;b_[i]``; arguments are cut at the first top-level ``(`` unless it
  is a Go method receiver (``pkg.(*T).M``) or ``(anonymous namespace)``; ``;`` in a
  name becomes ``:``; Java names lose their leading ``L`` when the comm is ``java*``;
* only the first event type seen is kept (a ``cycles`` profile mixed with another
  event folds the ``cycles`` samples only); the others are counted as skipped;
* each sample adds its *period* when the event line prints one (``perf script``'s
  default for ``perf record -F``/``-c``), else 1 -- as inferno does since 0.11;
* a sample whose call chain is empty after cleaning is not folded (counted as empty).

Where inferno warns about a line it cannot read and goes on, this parser raises
:class:`FormatError` naming the file and line: a damaged profile is an error.

Per sample the parser yields ``(time, pid, tid, comm, frames, count, weight)``:
``time`` the timestamp perf printed (seconds, its own clock: ``perf_clock``, or the
clock given to ``perf record -k``; NaN when ``perf script -F`` left it out), ``pid``
-1 when perf printed only the tid (its default for ``-p``; ``-F pid,tid`` prints
``PID/TID``), ``frames`` the cleaned stack root -> leaf joined by ``;`` without the
comm, ``count`` 1 and ``weight`` the period (1 when not printed).

Speed: records are split on blank lines in bulk, and a record's call-chain text is
folded once and then looked up (identical chains are common); memory is bounded by the
number of distinct chains (the caches are cleared when they grow past a limit).
"""

from __future__ import annotations

import codecs
import math
import re
from typing import IO, Iterator

from .errors import FormatError
from .symbols import HEX, fix_rust_symbol, tidy_generic

NAME = "perf"

Sample = tuple  # (time, pid, tid, comm, frames, count, weight)

_CHUNK = 1 << 20           # bytes read at a time
_CACHE_MAX = 200_000       # entries per cache before it is cleared

# An event line: the first all-digits word (a "PID/TID" or "TID") after a space,
# as inferno's event_line_parts finds it.
_EVENT = re.compile(r"(.*?) ([0-9/]+) ")


# --- "is this my format?" --------------------------------------------------------------


def is_format(head: str) -> bool:
    """inferno's check: the first non-comment line is an event line and the line after
    it a stack line (``ADDR SYMBOL (MODULE)``)."""
    last_was_event = False
    for line in head.splitlines()[:200]:
        line = line.strip()
        if line.startswith("#"):
            continue
        if not line:
            last_was_event = False
            continue
        if last_was_event:
            return _stack_line_parts(line) is not None
        if _event_parts(line) is None:
            return False
        last_was_event = True
    return False


# --- the pieces of inferno's collapse-perf ---------------------------------------------


def _event_parts(line: str):
    """(comm, pid, tid, rest) of an event line, or None."""
    m = _EVENT.match(line)
    if m is None:
        return None
    word = m.group(2)
    slash = word.rfind("/")
    if slash >= 0:
        pid, tid = word[:slash], word[slash + 1:]
    else:
        pid, tid = "?", word
    return m.group(1).strip(), pid, tid, line[m.end():]


def _stack_line_parts(line: str):
    """(pc, rawfunc, module) of ``ADDR SYMBOL (MODULE)``, or None."""
    parts = line.lstrip().split(" ", 1)
    if len(parts) < 2:
        return None
    pc = parts[0].rstrip()
    rest = parts[1].rsplit(" ", 1)
    if len(rest) < 2:
        return None
    module = rest[1]
    if not (module.startswith("(") and module.endswith(")")) or len(module) < 2:
        return None
    module = module[1:-1]
    rawfunc = rest[0].strip() or " "
    return pc, rawfunc, module


def _with_module_fallback(module: str, func: str) -> str:
    if func != "[unknown]" or module == "[unknown]":
        return func
    return "[" + module[module.rfind("/") + 1:] + "]"


def stack_line_funcs(line: str, java: bool) -> tuple[str, ...] | None:
    """The cleaned frames one stack line contributes (root-side first), ``()`` for a
    dropped frame, None when it is not a stack line."""
    parts = _stack_line_parts(line)
    if parts is None:
        return None
    pc, rawfunc, module = parts
    off = rawfunc.rfind("+0x")
    if off >= 0 and all(c in HEX for c in rawfunc[off + 3:]):
        rawfunc = rawfunc[:off]
    if rawfunc.startswith("("):
        return ()
    rawfunc = fix_rust_symbol(rawfunc)
    out = []
    for func in rawfunc.split("->"):
        func = tidy_generic(_with_module_fallback(module, func))
        if java and func.startswith("L") and "/" in func:
            func = func[1:]
        if out and "_[i]" not in func:
            func += "_[i]"
        out.append(func)
    return tuple(out)


def _period_event(rest: str):
    """(time, period, event, single-line stack) from what follows the tid."""
    pieces = rest.split(":", 2)
    t = math.nan
    toks = pieces[0].rsplit(None, 1)
    if toks and "." in toks[-1]:
        try:
            t = float(toks[-1])
        except ValueError:
            pass
    event = period = single = None
    if len(pieces) > 1:
        toks = pieces[1].rsplit(" ", 2)
        event = toks[-1]
        if len(toks) > 1:
            p = toks[-2]
            if p.isascii() and p.lstrip("+").isdigit() and p.count("+") <= 1:
                period = int(p)
        if len(pieces) > 2:
            post = pieces[2]
            cut = min((i for i in (post.find(":"), post.find(" ")) if i >= 0), default=-1)
            post = post[cut + 1:].strip()
            single = post or None
    return t, period, event, single


# --- the parser ---------------------------------------------------------------------------


class _Bad(Exception):
    """A damaged line, ``rel`` lines after the record's event line."""

    def __init__(self, rel: int, expected: str, got: str):
        self.rel, self.expected, self.got = rel, expected, got


_SLOW = object()           # a call chain that needs inferno's line-by-line rules
_MISS = object()


class _Folder:
    """State of one pass over a file: caches, the event filter, counters."""

    def __init__(self, source: str):
        self.source = source
        self.event: str | None = None
        self.line_cache: dict[str, str | None] = {}        # line -> frames ("" dropped)
        self.line_cache_java: dict[str, str | None] = {}
        self.body_cache: dict[tuple[str, bool], object] = {}
        self.stats = {"samples": 0, "skipped_events": 0, "empty": 0}

    def frames_of(self, body: str, java: bool):
        """Stack lines (leaf first) -> folded frames joined, root first; _SLOW when a
        line is only whitespace (it ends the stack: the record is re-read line by
        line)."""
        cache = self.line_cache_java if java else self.line_cache
        get = cache.get
        lines = body.split("\n")
        got = [get(x, _MISS) for x in lines]
        if _MISS in got:
            if len(cache) > _CACHE_MAX:
                cache.clear()
            for i, x in enumerate(got):
                if x is _MISS:
                    line = lines[i]
                    funcs = stack_line_funcs(line.rstrip(), java)
                    got[i] = cache[line] = None if funcs is None else ";".join(funcs)
        if None in got:
            i = got.index(None)
            if not lines[i].strip():
                return _SLOW
            raise _Bad(i + 1, "a stack line 'ADDRESS SYMBOL (MODULE)'", lines[i].strip())
        got.reverse()
        return ";".join([x for x in got if x])

    def record(self, head: str, body: str | None):
        """One sample from its event line and the text of its stack lines (None when
        there are none); None when it is not folded; _SLOW when the stack text has
        comment or blank-looking lines (the caller re-reads the record line by line)."""
        head = head.rstrip()
        ev = _event_parts(head)
        if ev is None:
            raise _Bad(0, "a perf script event line "
                       "'COMM [PID/]TID [CPU] TIME: [PERIOD] EVENT:'", head)
        comm, pid, tid, rest = ev
        t, period, event, single = _period_event(rest)
        if event is not None:
            if self.event is None:
                self.event = event
            elif event != self.event:
                self.stats["skipped_events"] += 1
                return None
        java = comm.startswith("java")
        if body is None:
            frames = None
        else:
            key = (body, java)
            frames = self.body_cache.get(key, False)
            if frames is False:
                if len(self.body_cache) > _CACHE_MAX:
                    self.body_cache.clear()
                if body[0] == "#" or "\n#" in body:
                    frames = _SLOW
                else:
                    frames = self.frames_of(body, java) or None
                self.body_cache[key] = frames
            if frames is _SLOW:
                return _SLOW
        if single is not None:
            funcs = stack_line_funcs(single, java)
            if funcs is None:
                raise _Bad(0, "a stack after the event", single)
            extra = ";".join(funcs)
            frames = extra if not frames else (frames + ";" + extra if extra else frames)
        if not frames:
            self.stats["empty"] += 1
            return None
        self.stats["samples"] += 1
        return (t, _int(pid), _int(tid), comm, frames, 1, period if period is not None else 1)


def _int(s: str) -> int:
    return int(s) if s.isdigit() else -1


def _slow_records(text: str) -> Iterator[tuple[str, str | None, list[int]]]:
    """A record read with inferno's line-by-line rules: comment lines are skipped, a
    line of whitespace ends a stack. Yields (event line, stack text, the line index of
    the event line and of each stack line)."""
    head: str | None = None
    body: list[str] = []
    where: list[int] = []
    for i, line in enumerate(text.split("\n")):
        if line.startswith("#"):
            continue
        if not line.strip():
            if head is not None:
                yield head, "\n".join(body) if body else None, where
            head, body = None, []
        elif head is None:
            head, where = line, [i]
        else:
            body.append(line)
            where.append(i)
    if head is not None:
        yield head, "\n".join(body) if body else None, where


def read(fh: IO, source: str = "<perf script>", stats: dict | None = None
         ) -> Iterator[Sample]:
    """Samples of a ``perf script`` text (a binary or text file object), streamed:
    memory depends on the distinct call chains, not on the input's size."""
    folder = _Folder(source)
    if stats is not None:
        stats.update(folder.stats)
        folder.stats = stats
    for block, lineno in text_blocks(fh):
        yield from _records(folder, block, lineno)


def text_blocks(fh: IO, size: int = _CHUNK) -> Iterator[tuple[str, int]]:
    """The input as text blocks that end at a blank line (at the end of the input for
    the last), each with the number of its first line. Bytes are decoded as UTF-8 with
    replacement characters, as inferno does."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    lineno, pending = 1, ""
    while True:
        chunk = fh.read(size)
        eof = not chunk
        if isinstance(chunk, bytes):
            data = decoder.decode(chunk, final=eof)
        else:
            data = chunk
        text = pending + data if pending else data
        if eof:
            if text:
                yield text, lineno
            return
        cut = text.rfind("\n\n")
        if cut < 0:
            pending = text
            continue
        cut += 2
        block, pending = text[:cut], text[cut:]
        yield block, lineno
        lineno += block.count("\n")


def _records(folder: _Folder, block: str, lineno: int) -> Iterator[Sample]:
    recs = block.split("\n\n")
    i = lead = 0
    try:
        for i, rec in enumerate(recs):
            if not rec:
                continue
            lead = 0
            if rec[0] == "\n":
                lead = len(rec) - len(rec.lstrip("\n"))
                rec = rec[lead:]
                if not rec:
                    continue
            if rec[-1] == "\n":
                rec = rec.rstrip("\n")
            head, nl, body = rec.partition("\n")
            s = _SLOW if head[0] == "#" or head.isspace() else \
                folder.record(head, body if nl else None)
            if s is _SLOW:
                for h, b, where in _slow_records(rec):
                    try:
                        s = folder.record(h, b)
                    except _Bad as e:
                        e.rel = where[e.rel]
                        raise
                    if s is not None:
                        yield s
            elif s is not None:
                yield s
    except _Bad as e:
        # Line numbers are counted only now, on the way out with the error.
        line = lineno + sum(r.count("\n") + 2 for r in recs[:i]) + lead + e.rel
        raise FormatError(folder.source, line, e.expected, e.got) from None
