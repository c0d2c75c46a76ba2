"""Every foreign format by name: its parser, its "is this my format?" check, ``detect``.

    from mongoprobe.formats import registry
    registry.names()                       # ('ycsb', 'ycsb-summary', 'vmstat', ...)
    registry.detect(text)                  # 'iostat', or None
    df = registry.parse("auto", "samples/sysstat/iostat-x-1-3.txt")
    df = registry.parse("mpstat", path, tz="UTC")

Importing this module is cheap (no pandas): parser modules are imported when first used,
so the command line can list the names without paying for them.

``detect`` tries the checks in the order of ``FORMATS`` -- the most specific first -- and
answers the first that accepts the text (its first 64 KiB). Formats marked ``auto=False``
(views derived from another format, such as ``iostat-totals``) are never detected.
``parse("auto", ...)`` parses with the first format that both accepts and reads the
text; when none does, its ``FormatError`` names every format tried and why each refused
(its signature line not found, or the parser's own error).

Every parser also reads a run's ``load.out`` (``formats/loadout.py``): its stamps are
taken off and both streams read in receive order, so ``parse ycsb RUN/load.out`` works.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
from dataclasses import dataclass
from typing import IO, Any, Callable


@dataclass(frozen=True)
class FormatSpec:
    name: str
    module: str  # under mongoprobe.formats (or mongoprobe.)
    parse: str  # function name: (text_or_path, source=None, [tz=None]) -> DataFrame
    check: str  # function name: (text) -> bool
    what: str  # one line for --help
    auto: bool = True  # answered by detect()
    post: str | None = None  # "module:function" applied to the parsed frame
    latency: tuple[str, ...] = ()  # columns `mongoprobe quantize` renders by default
    by: str | None = None  # column it groups histograms by by default
    sign: str = ""  # what the check looks for, named when it refuses a text
    kind: str = "table"  # "stacks": a stack format (rows are stack samples)
    stream: str | None = None  # stack formats: "module:read", samples streamed

    def _fn(self, ref: str) -> Callable:
        mod, _, fn = ref.rpartition(":") if ":" in ref else (self.module, "", ref)
        return getattr(importlib.import_module(f"mongoprobe.formats.{mod}"), fn)

    def reader(self) -> Callable:
        """A stack format's streaming reader ``read(fh, source, stats[, meta])``."""
        if self.stream is None:
            raise ValueError(f"{self.name} is not a stack format")
        return self._fn(self.stream)

    def is_format(self, text: str) -> bool:
        return bool(self._fn(self.check)(text))

    def parse_text(self, text_or_path: Any, source: str | None = None, **kw: Any):
        fn = self._fn(self.parse)
        params = inspect.signature(fn).parameters
        kw = {k: v for k, v in kw.items() if k in params and v is not None}
        df = fn(text_or_path, source, **kw)
        return self._fn(self.post)(df) if self.post else df


FORMATS: tuple[FormatSpec, ...] = (
    FormatSpec("ycsb", "ycsb", "parse_ycsb", "is_ycsb",
               "YCSB status lines: one row per interval per operation",
               latency=("p99_us", "avg_us"), by="op",
               sign="status lines '[DATE] N sec: N operations; ...'"),
    FormatSpec("ycsb-summary", "ycsb", "parse_ycsb_summary", "is_ycsb_summary",
               "YCSB final summary: [SECTION], METRIC, VALUE", latency=("value_us",),
               by="section", sign="'[OVERALL], RunTime(ms), N' or '[OP], Operations, N'"),
    FormatSpec("iibench", "iibench", "parse_iibench", "is_iibench",
               "iibench.py progress lines: one row per interval",
               sign="header 'i_sec t_sec i_ips t_ips ... retry_q'"),
    FormatSpec("iibench-summary", "iibench", "parse_iibench_summary", "is_iibench_summary",
               "iibench.py totals: Totals:, Query thread:, getmin",
               sign="'Totals: S secs, R rows/sec, ...' or 'Query thread: N queries, ...'"),
    FormatSpec("iostat", "iostat", "parse_iostat", "is_iostat",
               "sysstat iostat (-x) device rows", sign="iostat's 'Device' header"),
    FormatSpec("iostat-totals", "iostat", "parse_iostat", "is_iostat",
               "iostat summed over devices, one row per report", auto=False,
               post="iostat:iostat_totals"),
    FormatSpec("iostat-cpu", "iostat", "parse_iostat_cpu", "is_iostat",
               "iostat avg-cpu lines", auto=False),
    FormatSpec("mpstat", "mpstat", "parse_mpstat", "is_mpstat",
               "sysstat mpstat CPU utilisation (-P ALL)", sign="mpstat's 'CPU %usr' header"),
    FormatSpec("pidstat", "pidstat", "parse_pidstat", "is_pidstat",
               "sysstat pidstat (-u -d -w -r, -t), tables joined per interval",
               sign="pidstat's 'UID PID' header"),
    FormatSpec("vmstat", "vmstat", "parse_vmstat", "is_vmstat",
               "vmstat (Linux procps, -t, -w; SmartOS)", sign="vmstat's 'r b swpd' header"),
    FormatSpec("insert-benchmark-hist", "insert_benchmark", "parse_insert_benchmark_hist",
               "is_insert_benchmark_hist", "iibench response-time histogram rows",
               sign="header '256us 1ms 4ms ... gt max'"),
    FormatSpec("insert-benchmark", "insert_benchmark", "parse_insert_benchmark",
               "is_insert_benchmark", "insert-benchmark result tables (long form)",
               sign="table header such as 'ipsAvg ipsP95' or 'ips.av qps.av'"),
    FormatSpec("dtrace-latency", "dtrace_latency", "parse_dtrace_latency", "is_dtrace_latency",
               "dtrace/mongo_time.d: latency quantize per opcode, command, connection",
               sign="title 'latency_ns_by_command:' and the footer 'requests: N ...'"),
    FormatSpec("dtrace-latency-totals", "dtrace_latency", "parse_dtrace_latency_totals",
               "is_dtrace_latency", "dtrace/mongo_time.d: request counts, exact sums and "
               "maxima, footer counters", auto=False),
    FormatSpec("quantize", "quantize", "parse_quantize", "is_quantize",
               "DTrace quantize / bpftrace hist / bcc log2 histograms",
               sign="'value ---- Distribution ---- count' or '[lo, hi) N |@@|' rows"),
    FormatSpec("quantize-scalars", "quantize", "parse_scalars", "is_quantize",
               "scalar lines and probe footer next to printed histograms", auto=False),
    FormatSpec("events", "registry", "_parse_events", "_is_events",
               "per-request events: mongo_snoop.bt text or --events JSON lines",
               latency=("latency_ns",), by="command",
               sign="JSON lines with latency_ns and request_id, or a 'TIME(s) ... LAT(us)' header"),
    FormatSpec("prometheus", "registry", "_parse_prometheus", "_is_prometheus",
               "Prometheus text exposition (FerretDB /debug/metrics)",
               sign="'# TYPE name counter' lines"),
    FormatSpec("dtrace-drops", "dtrace_drops", "parse_dtrace_drops", "is_dtrace_drops",
               "DTrace's own losses on its stderr (drops, probe errors)",
               sign="'dtrace: N dynamic variable drops' or 'dtrace: error on enabled probe' lines"),
    FormatSpec("phase-markers", "phase_markers", "parse_phase_markers", "is_phase_markers",
               "### phase start|end name=NAME time=EPOCH_SECONDS",
               sign="'### phase start|end name=NAME' lines"),
    FormatSpec("mongoprobe-load", "registry", "_parse_load", "_is_load",
               "mongoprobe load interval lines (or a run's load.out)",
               sign="'### load uri=...' header line"),
    # Stack formats last: their rows are stack samples (formats/stack_table.py), and
    # folded stacks ("STACK COUNT" lines) are the least specific check of all.
    FormatSpec("perf-script", "stack_table", "parse_perf_script", "perf_script:is_format",
               "perf script output (perf record -g): stack samples", kind="stacks",
               stream="perf_script:read", sign="sample header lines 'comm pid time: N event:'"),
    FormatSpec("bpftrace-stacks", "stack_table", "parse_bpftrace_stacks",
               "bpftrace_stacks:is_format", "bpftrace stack maps, text or -f json",
               kind="stacks", stream="bpftrace_stacks:read",
               sign="map entries '@[..., kstack, ustack]: N' spanning lines"),
    FormatSpec("dtrace-stacks", "stack_table", "parse_dtrace_stacks", "dtrace_stacks:is_format",
               "DTrace aggregated stack()/ustack() output", kind="stacks",
               stream="dtrace_stacks:read", sign="indented frames 'module`function+0x..' "
               "ending in a count"),
    FormatSpec("folded", "stack_table", "parse_folded", "folded:is_format",
               'folded stacks ("frame;frame;frame COUNT")', kind="stacks",
               stream="folded:read", sign="every line 'frame;frame;... COUNT'"),
)
_BY_NAME = {f.name: f for f in FORMATS}


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> FormatSpec:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown format {name!r}; known: {', '.join(names())}") from None


def detect(text: str, kind: str | None = None) -> str | None:
    """The name of the first format (in ``FORMATS`` order) whose check accepts ``text``;
    ``kind`` ("table" or "stacks") keeps to formats of that kind."""
    head = text[:65536]
    for f in FORMATS:
        if f.auto and (kind is None or f.kind == kind) and f.is_format(head):
            return f.name
    return None


def read_text(text_or_path: str | os.PathLike[str] | IO[str], source: str | None = None):
    """(text, source) as every parser reads its input: text, path (one-line str) or file;
    a run's ``load.out`` gives the printed text of both streams, without the stamps."""
    from .loadout import plain_text
    from .source import read_input

    text, src = read_input(text_or_path, source)
    return plain_text(text), src



def parse(name: str, text_or_path: str | os.PathLike[str] | IO[str],
          source: str | None = None, **kw: Any):
    """Parse with the named format (``"auto"``: ``detect`` it). Keyword options a parser
    does not take (``tz`` for YCSB summaries) are dropped. Raises ``FormatError`` when
    ``auto`` recognises nothing, or on damaged input."""
    text, src = read_text(text_or_path, source)
    if name != "auto":
        # the text goes on as a file: a one-line text must not be taken for a path
        return get(name).parse_text(io.StringIO(text), src, **kw)
    return parse_auto(text, src, **kw)[0]


def parse_auto(text: str, source: str, **kw: Any):
    """(DataFrame, format name) of the first format that accepts and reads ``text``.
    ``FormatError`` naming every format tried, and why each refused, when none does."""
    from .errors import FormatError

    why: list[str] = []
    head = text[:65536]
    for f in FORMATS:
        if not f.auto:
            continue
        if not f.is_format(head):
            why.append(f"{f.name}: no {f.sign or f.what}")
            continue
        try:
            return f.parse_text(io.StringIO(text), source, **kw), f.name
        except FormatError as e:
            why.append(f"{f.name}: {e}")
    raise FormatError(source, 1, "a known format; tried " + "; ".join(why))


# --- formats whose modules predate this registry ----------------------------------------


def _is_events(text: str) -> bool:
    for s in text[:65536].splitlines():
        s = s.strip()
        if s.startswith("{"):
            return '"latency_ns"' in s and '"request_id"' in s
        if s.startswith("TIME(s)") and "LAT(us)" in s:
            return True
    return False


def _parse_events(text_or_path: Any, source: str | None = None):
    from .wire_events import parse_events_json, parse_snoop

    text, src = read_text(text_or_path, source)
    lines = text.splitlines()
    first = next((s.strip() for s in lines if s.strip()), "")
    return (parse_events_json if first.startswith("{") else parse_snoop)(lines, src)


def _is_load(text: str) -> bool:
    from .mongoprobe_load import is_mongoprobe_load

    return is_mongoprobe_load(text)


def _parse_load(text_or_path: Any, source: str | None = None):
    from .mongoprobe_load import parse

    text, src = read_text(text_or_path, source)
    return parse(text.splitlines(), src)


def _is_prometheus(text: str) -> bool:
    from .prometheus import is_prometheus

    return is_prometheus(text)


def _parse_prometheus(text_or_path: Any, source: str | None = None):
    from .prometheus import parse_prometheus

    return parse_prometheus(*read_text(text_or_path, source))
