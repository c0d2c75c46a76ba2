"""Packet captures of a MongoDB-protocol port with tshark (Debian's, run as root).

``Capture(output, port)`` runs ``tshark -i IFACE -f "tcp port N" -w FILE`` (optionally
a ring buffer, ``-b filesize:KB -b files:K``, for long runs) and stops it with SIGINT,
which makes tshark flush and close the file. It is what ``mongoprobe capture`` and the
``pcap`` collector of ``mongoprobe record`` use::

    with Capture("run/net.pcapng", port=27017) as cap:
        ...                              # drive the load
    cap.result                           # files, packets captured, packets dropped

Starting is confirmed, not assumed: tshark says "Capturing on 'Loopback: lo'" a few
milliseconds before packets are really written (measured here: a connection made
1 ms after that line was missing from the file, one made 12 ms after was there). On
the loopback interface ``start()`` therefore also captures UDP datagrams to a closed
marker port (the filter is ``tcp port N or udp dst port M``) and sends them every 20
ms until one is in the file; the file then holds a few UDP packets beside the MongoDB
traffic, which the decoder (``tshark_fields``) ignores since it reads TCP only. On another
interface loopback datagrams would not pass, so ``start()`` waits ``settle_s``
instead.

Stopping is confirmed the same way. tshark (dumpcap, libpcap's TPACKET_V3 ring) hands
packets over in blocks, and a SIGINT drops the block still being filled: here the last
30 ms of a run were missing from a file stopped right after the load. ``stop()`` first
sends an end marker and waits until it is in the file, so every packet before it was
written, then sends SIGINT. For the same reason a time limit is kept by ``stop()``
(see ``mongoprobe capture -d``), not by tshark's own ``-a duration:``.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MARKER = b"mongoprobe-capture-marker"
RING_NAME = re.compile(r"_(\d{5,})_\d{14}\.[^.]+$")   # tshark -b: NAME_00001_YYYYMMDDhhmmss.EXT


class CaptureError(RuntimeError):
    """tshark could not be started or did not start capturing."""


def why_cannot_capture() -> str | None:
    """None when a capture can run here, else the one-line reason."""
    if shutil.which("tshark") is None:
        return "tshark is not installed (Debian: apt-get install tshark; scripts/setup.sh does it)"
    if os.geteuid() != 0:
        return "capturing packets needs root (tshark/dumpcap open a raw packet socket)"
    return None


@dataclass
class CaptureResult:
    """What a stopped capture wrote: its files (ring-buffer files in order), the packet
    count and the drops tshark reported (None when it did not say)."""

    files: list[str] = field(default_factory=list)
    packets: int | None = None
    dropped: int | None = None
    returncode: int | None = None
    stderr: str = ""


def ring_order(files: list[str]) -> list[str]:
    """A ring buffer's files in the order tshark wrote them (by file number, which a
    shell glob sorts wrongly past 99999); other names as given."""
    nums = [RING_NAME.search(f) for f in files]
    if len(files) > 1 and all(nums):
        return [f for _, f in sorted(zip((int(m.group(1)) for m in nums), files))]
    return list(files)


def _file_has(path: str, token: bytes, tail: int | None) -> bool:
    try:
        with open(path, "rb") as fh:
            if tail:
                fh.seek(max(0, os.path.getsize(path) - tail))
            return token in fh.read(tail or 16 << 20)
    except OSError:
        return False


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Capture:
    """A running tshark capture of ``tcp port PORT`` on ``iface`` into ``output``.

    ``ring_mb`` and ``ring_files``: a ring buffer of ``ring_files`` files of ``ring_mb``
    MB each (tshark names them ``STEM_NNNNN_YYYYmmddHHMMSS.EXT``); ``result.files`` lists
    the ones left. ``buffer_mb``: the kernel capture buffer (``-B``), larger than
    tshark's 2 MB default so bursts on loopback are not dropped.
    """

    def __init__(self, output: str | os.PathLike, port: int, iface: str = "lo",
                 ring_mb: int | None = None,
                 ring_files: int | None = None, buffer_mb: int = 32,
                 settle_s: float = 0.5, tshark: str = "tshark") -> None:
        if ring_files and not ring_mb:
            raise ValueError("a ring buffer needs ring_mb (the size of each file)")
        self.output = str(output)
        self.port, self.iface = int(port), iface
        self.ring_mb, self.ring_files = ring_mb, ring_files
        self.buffer_mb, self.settle_s, self.tshark = buffer_mb, settle_s, tshark
        self.marker_port = _free_udp_port() if iface == "lo" else None
        self.proc: subprocess.Popen | None = None
        self.result: CaptureResult | None = None
        self._stderr: list[str] = []
        self._reader: threading.Thread | None = None
        self.flushed: bool | None = None   # the end marker reached the file before SIGINT

    # --- the command ----------------------------------------------------------------

    @property
    def capture_filter(self) -> str:
        f = f"tcp port {self.port}"
        if self.marker_port:
            f += f" or (udp dst port {self.marker_port} and dst host 127.0.0.1)"
        return f

    def command(self) -> list[str]:
        cmd = [self.tshark, "-n", "-q", "-i", self.iface, "-f", self.capture_filter,
               "-B", str(self.buffer_mb), "-w", self.output]
        if self.ring_mb:
            cmd += ["-b", f"filesize:{int(self.ring_mb) * 1000}"]
            if self.ring_files:
                cmd += ["-b", f"files:{int(self.ring_files)}"]
        return cmd

    def files(self) -> list[str]:
        """The files written so far (one, or the ring buffer's in order)."""
        if not self.ring_mb:
            return [self.output] if os.path.exists(self.output) else []
        stem, ext = os.path.splitext(self.output)
        return sorted(glob.glob(f"{glob.escape(stem)}_[0-9][0-9][0-9][0-9][0-9]_*{ext}"))

    # --- start and stop -------------------------------------------------------------

    def start(self, timeout: float = 60.0) -> "Capture":
        why = why_cannot_capture()
        if why:
            raise CaptureError(why)
        Path(self.output).parent.mkdir(parents=True, exist_ok=True)
        if not self.ring_mb and os.path.exists(self.output):
            os.unlink(self.output)      # the marker check must not find an old file's
        # Its own session: a Ctrl-C at the terminal reaches us, not tshark, so stop()
        # can flush before tshark ends (the CLI turns SIGTERM into the same stop).
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     text=True, errors="replace", start_new_session=True)
        started = threading.Event()

        def read_stderr() -> None:
            for line in self.proc.stderr:
                self._stderr.append(line)
                if "Capturing on" in line:
                    started.set()
            started.set()               # tshark ended (an error): stop waiting

        self._reader = threading.Thread(target=read_stderr, daemon=True)
        self._reader.start()
        deadline = time.monotonic() + timeout
        started.wait(timeout)
        if self.proc.poll() is not None or not any("Capturing on" in s for s in self._stderr):
            self._abort()
            raise CaptureError(f"tshark did not start capturing: {self.diagnostic()}")
        if self.marker_port:
            if not self._wait_for_marker(deadline):
                self._abort()
                raise CaptureError(f"tshark never wrote a packet to {self.output}: "
                                   f"{self.diagnostic()}")
        else:
            time.sleep(self.settle_s)
        return self

    def _wait_for_marker(self, deadline: float, token: bytes = MARKER,
                         tail: int | None = None) -> bool:
        """Send ``token`` datagrams until one is in the (newest) file: every packet
        captured before it has been written. ``tail``: search only the file's last bytes."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    return False
                s.sendto(token, ("127.0.0.1", self.marker_port))
                time.sleep(0.02)
                files = self.files()
                if files and _file_has(files[-1] if tail else files[0], token, tail):
                    return True
        return False

    def _abort(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def diagnostic(self) -> str:
        lines = [s.strip() for s in self._stderr
                 if s.strip() and "dangerous" not in s and "** (tshark" not in s]
        return lines[-1] if lines else "no message"

    def stop(self, timeout: float = 60.0) -> CaptureResult:
        """Flush (end marker), then SIGINT tshark, which closes the file; the result."""
        if self.result is not None:
            return self.result
        if self.proc is None:
            raise CaptureError("capture was not started")
        self.flushed = None
        if self.proc.poll() is None:
            if self.marker_port:
                token = MARKER + b"-end-" + os.urandom(8).hex().encode()
                self.flushed = self._wait_for_marker(time.monotonic() + 20, token, 4 << 20)
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self._finish()

    def _finish(self) -> CaptureResult:
        if self.result is not None:
            return self.result
        if self._reader:
            self._reader.join(10)
        text = "".join(self._stderr)
        captured = re.findall(r"(\d+) packets? captured", text)
        dropped = re.findall(r"(\d+) packets? dropped", text)
        self.result = CaptureResult(
            files=self.files(), packets=int(captured[-1]) if captured else None,
            dropped=sum(int(d) for d in dropped) if captured else None,
            returncode=self.proc.returncode, stderr=text)
        return self.result

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __enter__(self) -> "Capture":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
