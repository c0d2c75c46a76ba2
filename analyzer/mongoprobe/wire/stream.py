"""Incremental decoding of a connection's byte stream into MongoDB wire messages.

``StreamDecoder`` is fed one direction of a connection as it comes (tcp payloads, a
capture's bytes) and returns the complete messages, each decoded by
``wire.decode_message``. It never raises: bytes that cannot start a valid message are
skipped until a plausible header starts one that decodes (the tail of a message cut by
a capture's start, garbage). ``decode_stream`` decodes a whole captured stream.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from mongoprobe.wire.decode import (HEADER_SIZE, MAX_MESSAGE_SIZE, OPCODES, Message, WireError, _I32,
                             decode_header, decode_message)


class StreamDecoder:
    """Incremental decoder for one direction of a connection's byte stream.

    `feed` never raises. Bytes that cannot start a valid message are skipped (counted in
    `skipped_bytes`) until a plausible header (sane length, known opcode) starts a message
    that decodes. Each loss of synchronisation appends one WireError to `errors`, its offset
    counted from the start of the stream. Invariant:
    skipped_bytes + consumed_bytes + pending == total bytes fed.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # stream offset of self._buf[0]
        self._searching = False  # lost sync: looking for the next plausible header
        # Lookahead while a message waits for its body: stream offsets of later headers still
        # incomplete, and how far later headers have been looked for.
        self._waiting_at = -1
        self._deferred: list[int] = []
        self._scanned_to = 0
        self.skipped_bytes = 0
        self.consumed_bytes = 0
        self.errors: list[WireError] = []

    @property
    def pending(self) -> int:
        """Bytes held back because they may start a message that has not fully arrived."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        messages: list[Message] = []
        pos = 0
        while True:
            if self._searching:
                pos = self._skip(pos, self._next_candidate(pos))
            verdict = self._try_message(pos)
            if verdict is None:
                later = self._later_message(pos)
                if later is None:
                    break  # wait for more bytes
                self._lose_sync(
                    WireError(
                        self._base + pos, f"header never completed; a message follows at offset {self._base + later}"
                    )
                )
                pos = self._skip(pos, later)
            elif isinstance(verdict, Message):
                messages.append(verdict)
                pos += verdict.length
                self.consumed_bytes += verdict.length
                self._searching = False
            else:
                self._lose_sync(WireError(self._base + pos + verdict.offset, verdict.message))
                pos = self._skip(pos, pos + 1)
        del self._buf[:pos]
        self._base += pos
        return messages

    def close(self) -> int:
        """End of stream: count any incomplete message as skipped; return how many bytes that was."""
        left = len(self._buf)
        if left:
            self.errors.append(WireError(self._base, f"stream ends inside a message ({left} bytes left)"))
            self.skipped_bytes += left
            self._base += left
            self._buf.clear()
        return left

    def _skip(self, pos: int, to: int) -> int:
        self.skipped_bytes += to - pos
        return to

    def _lose_sync(self, error: WireError) -> None:
        if not self._searching:  # report where sync was lost, not every false candidate after it
            self.errors.append(error)
        self._searching = True

    def _try_message(self, pos: int) -> Message | WireError | None:
        """The message at `pos`, why there is none (offset relative to `pos`), or None if more
        bytes are needed."""
        buf = self._buf
        if len(buf) - pos >= 4 and not _plausible_length(buf, pos):
            return WireError(0, f"messageLength {_I32.unpack_from(buf, pos)[0]} is out of range")
        if len(buf) - pos < HEADER_SIZE:
            return None
        try:
            header = decode_header(buf, pos)
        except WireError as exc:
            return WireError(exc.offset - pos, exc.message)
        if len(buf) - pos < header.length:
            return None
        try:
            return decode_message(buf[pos : pos + header.length])
        except WireError as exc:
            return exc

    def _candidates(self, start: int) -> Iterator[int]:
        """Offsets from `start` holding a full header with a known opcode and a sane length."""
        search = start + 12
        while (match := _OPCODE_PATTERN.search(self._buf, search)) is not None:
            if _plausible_length(self._buf, match.start() - 12):
                yield match.start() - 12
            search = match.start() + 1

    def _next_candidate(self, pos: int) -> int:
        """The first offset from `pos` that may start a message, or a tail too short to tell."""
        found = next(self._candidates(pos), None)
        if found is not None:
            return found
        candidate = max(pos, len(self._buf) - HEADER_SIZE + 1)  # earlier ones have a full, unknown opcode
        while len(self._buf) - candidate >= 4 and not _plausible_length(self._buf, candidate):
            candidate += 1
        return candidate

    def _later_message(self, pos: int) -> int | None:
        """While the message at `pos` waits for its body, the first later complete message
        that decodes, if any. A false header in garbage (OP_REPLY is opcode 1, common in
        BSON) must not hold the stream up for as much as 48 MB. Each byte is searched once."""
        if self._waiting_at != self._base + pos:
            self._waiting_at, self._deferred, self._scanned_to = self._base + pos, [], self._base + pos + 1
        start = self._scanned_to - self._base
        self._scanned_to = self._base + max(start, len(self._buf) - HEADER_SIZE + 1)
        deferred, self._deferred = self._deferred, []
        for candidate in [d - self._base for d in deferred] + list(self._candidates(start)):
            verdict = self._try_message(candidate)
            if isinstance(verdict, Message):
                return candidate
            if verdict is None:
                self._deferred.append(self._base + candidate)
        return None


# Any known opcode, little-endian, as it appears at offset 12 of a header.
_OPCODE_PATTERN = re.compile(b"|".join(re.escape(_I32.pack(op)) for op in OPCODES))


def _plausible_length(buf: bytearray, pos: int) -> bool:
    return HEADER_SIZE <= _I32.unpack_from(buf, pos)[0] <= MAX_MESSAGE_SIZE


def decode_stream(data: bytes) -> tuple[list[Message], int]:
    """Decode a complete captured stream: the messages found and the bytes skipped
    (garbage and a trailing incomplete message)."""
    decoder = StreamDecoder()
    messages = decoder.feed(data)
    decoder.close()
    return messages, decoder.skipped_bytes
