"""Which tracer runs the wire probes: ``--engine auto``, the default of ``latency``,
``snoop`` and ``record``.

bcc where it can compile here (its python imports bcc and the kernel's headers are
there: ``probes.why_cannot_bcc``), else bpftrace, else DTrace. A target whose TLS
library only some engines decode gets one of those first: Go's ``crypto/tls``
(FerretDB) only bcc decodes (its returns are probed at RET instructions, which
bpftrace 0.17 and D cannot place); OpenSSL every engine. The choice is said in one
line, with why and what else could run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mongoprobe.run import tracer as probes

ENGINES = ("bcc", "bpftrace", "dtrace")
# the engines that decode each TLS library (probes/tlshooks.py's kinds)
DECODES = {"go": ("bcc",), "openssl": ("bcc", "bpftrace", "dtrace")}
TLS_NAMES = {"go": "Go crypto/tls", "openssl": "OpenSSL"}


def why_not(engine: str) -> str | None:
    """None when ``engine`` can run here, else why not."""
    return {"bcc": probes.why_cannot_bcc, "bpftrace": probes.why_cannot_trace,
            "dtrace": probes.why_cannot_dtrace}[engine]()


def tls_kinds(pid: int, tls: str = "auto") -> list[str]:
    """The TLS libraries ("go", "openssl") the target has, as the probes would hook
    them; none with ``--tls off`` or when they cannot be read."""
    if tls == "off":
        return []
    th = probes.probe_module("tlshooks")
    try:
        return sorted({h.kind for h in th.find(pid)})
    except (OSError, th.TlsError):
        return []


@dataclass
class Choice:
    engine: str
    why: str                    # the line said on stderr
    fallbacks: list[str] = field(default_factory=list)   # tried in turn if it fails
    tls: list[str] = field(default_factory=list)         # the target's TLS libraries


def choose(pid: int, tls: str = "auto", engines: tuple[str, ...] = ENGINES) -> Choice:
    """The engine for ``pid``, of ``engines`` in order of preference; ProbeError saying
    why each cannot run when none can."""
    whys = {e: why_not(e) for e in engines}
    ok = [e for e in engines if whys[e] is None]
    if not ok:
        raise probes.ProbeError("no engine can trace here: " + "; ".join(
            f"{e}: {whys[e]}" for e in engines))
    kinds = tls_kinds(pid, tls)

    def decodes(e: str) -> bool:
        return all(e in DECODES[k] for k in kinds)

    order = sorted(ok, key=lambda e: (not decodes(e), engines.index(e)))
    chosen = order[0]
    said = [f"{_short(chosen)} compiles here: kernel headers at "
            f"{probes.kernel_headers()}" if chosen == "bcc"
            else f"{_short(chosen)} runs here"]
    libs = " and ".join(TLS_NAMES[k] for k in kinds)
    if kinds and decodes(chosen):
        said.append(f"it decodes the target's {libs}")
    elif kinds:
        said.append(f"the target's {libs} not decoded: only "
                    f"{', '.join(e for e in engines if all(e in DECODES[k] for k in kinds))} "
                    "does")
    said += [f"{e} not: {whys[e]}" for e in engines if whys[e] and engines.index(e)
             < engines.index(chosen)]
    if order[1:]:
        said.append(f"{' and '.join(map(_short, order[1:]))} also available")
    return Choice(chosen, f"engine {chosen} ({'; '.join(said)})", order[1:], kinds)


def _short(engine: str) -> str:
    """"bcc 0.26.0", "bpftrace 0.17.0", "dtrace Oracle D 2.0"."""
    return probes.tracer_label(engine).split(" (")[0]


def instead(engine: str, pid: int, tls: str = "auto") -> str:
    """" (use --engine X)": the engine to use when ``engine`` cannot run the tool, or
    "" when no other can run here."""
    others = tuple(e for e in ENGINES if e != engine)
    try:
        return f" (use --engine {choose(pid, tls, others).engine})"
    except probes.ProbeError:
        return ""
