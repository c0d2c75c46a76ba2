"""``mongoprobe capture`` and ``mongoprobe pcap``: record a port with tshark, and read
client-visible latency back from a capture (the ``mongoprobe.pcap`` package).

``register(subparsers)`` adds them to ``mongoprobe``; each subcommand is one
``cmd_<name>(args)``. Data goes to stdout, diagnostics (one line each) to stderr.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from .common import RAW, CommandError, port, positive

CAPTURE_EXAMPLES = """examples:
  mongoprobe capture -o run.pcapng --port 27017          # until Ctrl-C
  mongoprobe capture -o run.pcapng --port 27017 -d 60    # one minute
  mongoprobe capture -o ring.pcapng --port 27017 --ring-mb 100 --ring-files 10
                                      # long runs: keep the last 10 files of 100 MB
"""

PCAP_EXAMPLES = """examples:
  mongoprobe pcap run.pcapng --port 27017          # latency per command (quantize)
  mongoprobe pcap run.pcapng                       # server port found from the SYNs
  mongoprobe pcap run.pcapng --by op --unit us     # per opcode, in microseconds
  mongoprobe pcap run.pcapng --by stream           # per TCP connection
  mongoprobe pcap run.pcapng --json                # the keys of latency --json
  mongoprobe pcap ring_*.pcapng --port 27017       # a ring buffer's files, as one capture
"""

# --- capture -----------------------------------------------------------------------------


def cmd_capture(args: argparse.Namespace) -> int:
    from ..pcap.capture import Capture, CaptureError, why_cannot_capture

    why = why_cannot_capture()
    if why:
        raise CommandError(why)
    if args.ring_files and not args.ring_mb:
        raise CommandError("--ring-files needs --ring-mb (the size of each file)")
    cap = Capture(args.output, args.port, iface=args.interface, ring_mb=args.ring_mb,
                  ring_files=args.ring_files)
    try:
        cap.start()
    except CaptureError as e:
        raise CommandError(str(e)) from None
    print(f"Capturing TCP port {args.port} on {args.interface} into {args.output}... "
          "Hit Ctrl-C to end.", file=sys.stderr, flush=True)
    end = time.monotonic() + args.duration if args.duration else None

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)      # stop cleanly: flush, then end tshark
    try:
        while cap.running and (end is None or time.monotonic() < end):
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    for sig in (signal.SIGINT, signal.SIGTERM):     # a second ^C must not orphan tshark
        signal.signal(sig, signal.SIG_IGN)
    res = cap.stop()
    if res.returncode not in (0, None) and not res.files:
        raise CommandError(f"tshark failed: {cap.diagnostic()}")
    dropped = f", {res.dropped} dropped" if res.dropped else ""
    print(f"{res.packets if res.packets is not None else '?'} packets captured{dropped}",
          file=sys.stderr)
    if cap.flushed is False:
        print("mongoprobe: tshark did not confirm its last packets were written; the "
              "capture may miss the final milliseconds", file=sys.stderr)
    for f in res.files:
        print(f)
    return 0


# --- pcap --------------------------------------------------------------------------------


def cmd_pcap(args: argparse.Namespace) -> int:
    from ..pcap import pairing, tshark_fields
    from ..pcap.capture import ring_order

    files = ring_order(args.file)
    args.file = files[0] if len(files) == 1 else files
    try:
        port = args.port
        if port is None:
            port, why = tshark_fields.detect_port(args.file)
            if port is None:
                raise CommandError(f"{files[0]}: {why}: nothing to decode")
            print(f"server port {port} ({why}); --port to choose", file=sys.stderr)
        result = pairing.summarize(args.file, port)
    except tshark_fields.PcapError as e:
        raise CommandError(str(e)) from None
    except KeyboardInterrupt:
        raise CommandError("interrupted", 130) from None
    dec = result.decode
    if not dec.messages and dec.other_ports and not dec.port_frames:
        try:
            dec.hint_port = tshark_fields.detect_port(args.file)[0]
        except tshark_fields.PcapError:
            pass
    if dec.messages:
        if args.json:
            print(json.dumps(result.to_json()))
        else:
            print(f"Client-visible latency: {dec.messages} messages on TCP port {port}\n")
            print(result.summary.render(by="conn" if args.by == "stream" else args.by,
                                        unit=args.unit), end="")
    if dec.fallback and not args.json:
        print(f"{dec.fallback - dec.unnamed} messages named by wire.py (tshark's fields "
              f"could not), {dec.unnamed} unnamed", file=sys.stderr)
    if dec.first_segment_unknown:
        print(f"mongoprobe: {dec.first_segment_unknown} messages timed at the segment that "
              "completed them (their first segment lay too far back)", file=sys.stderr)
    for w in dec.warnings:
        print(f"mongoprobe: {dec.path}: {w}", file=sys.stderr)
    if dec.problem:
        print(f"mongoprobe: {dec.problem}", file=sys.stderr)
    return 0 if dec.messages else 1


# --- registration ----------------------------------------------------------------------------


def register(sub) -> None:
    c = sub.add_parser("capture", help="record a port's traffic with tshark",
                       formatter_class=RAW, epilog=CAPTURE_EXAMPLES,
                       description="Capture TCP port N with tshark (filter 'tcp port N'), "
                       "until Ctrl-C or -d; prints the files written.")
    c.add_argument("-o", "--output", required=True, metavar="FILE", help="pcapng file")
    c.add_argument("--port", type=port, required=True, help="the server's TCP port")
    c.add_argument("-d", "--duration", type=float, metavar="SEC", help="stop after SEC")
    c.add_argument("-i", "--interface", default="lo", metavar="IFACE",
                   help="interface (default: lo)")
    c.add_argument("--ring-mb", type=positive, metavar="N",
                   help="ring buffer: start a new file every N MB")
    c.add_argument("--ring-files", type=positive, metavar="K",
                   help="ring buffer: keep the last K files")
    c.set_defaults(func=cmd_capture)

    p = sub.add_parser("pcap", help="client-visible latency from a capture",
                       formatter_class=RAW, epilog=PCAP_EXAMPLES,
                       description="Decode a capture with tshark (in bulk), pair replies "
                       "with requests per TCP stream, print latency histograms.")
    p.add_argument("file", metavar="FILE", nargs="+",
                   help="pcap or pcapng capture; several (a ring buffer's files) are read "
                   "as one, so a request and its reply in different files are paired")
    p.add_argument("--port", type=port, help="the server's TCP port (default: found "
                   "from the connection openings)")
    p.add_argument("--json", action="store_true", help="the keys of latency --json")
    p.add_argument("--by", choices=["command", "op", "stream"], default="command")
    p.add_argument("--unit", choices=["ns", "us", "ms"], default="us")
    p.set_defaults(func=cmd_pcap)
