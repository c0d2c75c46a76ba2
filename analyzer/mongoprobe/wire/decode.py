"""Decoder (and test encoders) for the MongoDB wire protocol.

Decodes the 16-byte MsgHeader and the bodies of OP_MSG, OP_QUERY, OP_REPLY, the legacy
OP_INSERT / OP_UPDATE / OP_DELETE / OP_GET_MORE / OP_KILL_CURSORS, and OP_COMPRESSED
(noop, snappy, zlib, zstd), following the "MongoDB Wire Protocol" reference and the
drivers' OP_MSG and OP_COMPRESSED specifications (mongodb/specifications).

For each message it reports the header fields, the flags, the command name (first key of
the command document, as sent), the database and collection, and the OP_MSG sections.
Command documents are read with `mongoprobe.wire.bson_scan`, which checks every length against
the bytes actually present. Malformed input raises `WireError` naming the byte offset;
`wire_stream.StreamDecoder` decodes a connection's byte stream and never raises;
`wire_encode` builds messages for the tests.

Compressed messages are reported as the message they wrap: `opcode` is the original
opcode, with `compressed`, `compressor` and `original_opcode` set.
"""

from __future__ import annotations

import dataclasses
import importlib
import struct
import zlib
from dataclasses import dataclass
from typing import Any, NamedTuple

import bson

from mongoprobe.wire import facts as wirefacts
from mongoprobe.wire.bson_scan import BsonError, Document, document_length, scan_document

OP_REPLY, OP_UPDATE, OP_INSERT, OP_QUERY = 1, 2001, 2002, 2004
OP_GET_MORE, OP_DELETE, OP_KILL_CURSORS, OP_COMPRESSED, OP_MSG = 2005, 2006, 2007, 2012, 2013
OPCODES: dict[int, str] = wirefacts.OPCODES
COMPRESSORS: dict[int, str] = {0: "noop", 1: "snappy", 2: "zlib", 3: "zstd"}

HEADER_SIZE = 16
MAX_MESSAGE_SIZE = 48_000_000  # the server's maxMessageSizeBytes

# OP_MSG flagBits. Bits 0-15 are "required": a parser must reject unknown ones.
CHECKSUM_PRESENT, MORE_TO_COME, EXHAUST_ALLOWED = 1 << 0, 1 << 1, 1 << 16
_REQUIRED_FLAG_MASK = 0xFFFF

_HEADER = struct.Struct("<iiii")
_I32, _U32, _I64 = struct.Struct("<i"), struct.Struct("<I"), struct.Struct("<q")
_COMPRESSED_PREFIX = struct.Struct("<iiB")  # originalOpcode, uncompressedSize, compressorId


opcode_name = wirefacts.opcode_name


class WireError(ValueError):
    """Malformed wire bytes; `offset` is where in the message (or stream) the problem is."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(f"offset {offset}: {message}")
        self.offset = offset
        self.message = message


class Header(NamedTuple):
    length: int
    request_id: int
    response_to: int
    opcode: int


@dataclass(frozen=True, slots=True)
class Section:
    """One OP_MSG section: kind 0 (the body) or kind 1 (a document sequence)."""

    kind: int
    size: int  # body: document length; sequence: the section's size field
    identifier: str | None = None  # kind 1 only, e.g. "documents"
    documents: int = 1


@dataclass(frozen=True, slots=True)
class Message:
    """One decoded message. `length` is the size on the wire; for OP_COMPRESSED the other
    fields describe the wrapped message (see the module docstring)."""

    length: int
    request_id: int
    response_to: int
    opcode: int
    opcode_name: str
    flags: int | None = None  # OP_MSG flagBits, OP_REPLY responseFlags, legacy flags
    more_to_come: bool = False
    exhaust_allowed: bool = False
    checksum_present: bool = False
    checksum_ok: bool | None = None  # None when there is no checksum
    command: str | None = None
    database: str | None = None
    collection: str | None = None
    sections: tuple[Section, ...] = ()
    compressed: bool = False
    compressor: str | None = None
    original_opcode: int | None = None
    cursor_id: int | None = None  # OP_REPLY, OP_GET_MORE
    starting_from: int | None = None  # OP_REPLY
    number_returned: int | None = None  # OP_REPLY
    note: str | None = None
    body_bson: bytes | None = dataclasses.field(default=None, repr=False)

    def body(self) -> dict[str, Any] | None:
        """The command (or first reply) document fully decoded by pymongo, None if impossible."""
        if self.body_bson is None:
            return None
        try:
            return bson.decode(self.body_bson)
        except bson.errors.InvalidBSON:  # the scanner vouched for the framing, not the nested documents
            return None


def decode_header(buf: bytes | bytearray, offset: int = 0) -> Header:
    """Read and validate the MsgHeader at `offset` (sane length, known opcode)."""
    available = len(buf) - offset
    if offset < 0 or available < HEADER_SIZE:
        raise WireError(offset, f"header needs {HEADER_SIZE} bytes, {max(available, 0)} available")
    header = Header(*_HEADER.unpack_from(buf, offset))
    if header.length < HEADER_SIZE:
        raise WireError(offset, f"messageLength {header.length} is smaller than the 16-byte header")
    if header.length > MAX_MESSAGE_SIZE:
        raise WireError(offset, f"messageLength {header.length} exceeds the {MAX_MESSAGE_SIZE}-byte maximum")
    if header.opcode not in OPCODES:
        raise WireError(offset + 12, f"unknown opcode {header.opcode}")
    return header


def decode_message(buf: bytes | bytearray) -> Message:
    """Decode exactly one complete message; raises only WireError."""
    buf = bytes(buf)
    header = decode_header(buf)
    if header.length != len(buf):
        raise WireError(0, f"messageLength {header.length} but {len(buf)} bytes given")
    if header.opcode == OP_COMPRESSED:
        return _decode_compressed(buf, header)
    return _decode_plain(buf, header)


def _decode_plain(buf: bytes, header: Header) -> Message:
    return _message(header, **_DECODERS[header.opcode](_Reader(buf, HEADER_SIZE, len(buf))))


def _message(header: Header, **fields: Any) -> Message:
    return Message(
        header.length, header.request_id, header.response_to, header.opcode, OPCODES[header.opcode], **fields
    )


class _Reader:
    """Bounds-checked cursor over buf[pos:end]; every failure is a WireError at its offset."""

    def __init__(self, buf: bytes, pos: int, end: int) -> None:
        self.buf, self.pos, self.end = buf, pos, end

    def _take(self, n: int, what: str) -> int:
        if self.end - self.pos < n:
            raise WireError(self.pos, f"{what} needs {n} bytes, {self.end - self.pos} left")
        self.pos += n
        return self.pos - n

    def int32(self, what: str) -> int:
        return _I32.unpack_from(self.buf, self._take(4, what))[0]

    def uint32(self, what: str) -> int:
        return _U32.unpack_from(self.buf, self._take(4, what))[0]

    def int64(self, what: str) -> int:
        return _I64.unpack_from(self.buf, self._take(8, what))[0]

    def cstring(self, what: str) -> str:
        nul = self.buf.find(b"\x00", self.pos, self.end)
        if nul < 0:
            raise WireError(self.pos, f"{what} is not NUL-terminated")
        try:
            text = self.buf[self.pos : nul].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise WireError(self.pos + exc.start, f"{what} is not valid UTF-8") from None
        self.pos = nul + 1
        return text

    def document(self, what: str) -> Document:
        doc = self.scan(self.pos, self.end, what)
        self.pos += doc.length
        return doc

    def scan(self, start: int, end: int, what: str) -> Document:
        try:
            return scan_document(self.buf, start, end)
        except BsonError as exc:
            raise WireError(exc.offset, f"{what}: {exc.message}") from None

    def documents(self, what: str) -> int:
        """Check the framing of the documents filling the rest of the reader; return their count."""
        count = 0
        while self.pos < self.end:
            try:
                self.pos += document_length(self.buf, self.pos, self.end)
            except BsonError as exc:
                raise WireError(exc.offset, f"{what} #{count}: {exc.message}") from None
            count += 1
        return count

    def expect_end(self, after: str) -> None:
        if self.pos != self.end:
            raise WireError(self.pos, f"{self.end - self.pos} unexpected bytes after {after}")

    def bson(self, doc: Document) -> bytes:
        return self.buf[doc.offset : doc.offset + doc.length]


def _command_fields(r: _Reader, doc: Document) -> dict[str, Any]:
    """Command name, $db and collection of a command document (OP_MSG body or OP_QUERY on $cmd)."""
    first = doc.first()
    command = first.key if first else None
    collection = first.value if first and first.type == 0x02 else None
    if command == "getMore":  # {getMore: <cursor id>, collection: "coll"}
        collection = doc.string("collection")
    return {"command": command, "database": doc.string("$db"), "collection": collection, "body_bson": r.bson(doc)}


def _split_namespace(namespace: str) -> tuple[str, str | None]:
    database, dot, collection = namespace.partition(".")
    return database, collection if dot else None


def _decode_op_msg(r: _Reader) -> dict[str, Any]:
    flags = r.uint32("flagBits")
    if flags & _REQUIRED_FLAG_MASK & ~(CHECKSUM_PRESENT | MORE_TO_COME):
        raise WireError(16, f"unknown required flag bits in flagBits 0x{flags:08x}")
    checksum_present = bool(flags & CHECKSUM_PRESENT)
    checksum_ok = None
    if checksum_present:
        r.end -= 4  # the CRC-32C trails the sections
        if r.end < r.pos:
            raise WireError(r.pos, "no room for the 4-byte checksum")
        checksum_ok = crc32c(r.buf[: r.end]) == _U32.unpack_from(r.buf, r.end)[0]
    sections: list[Section] = []
    body: dict[str, Any] | None = None
    while r.pos < r.end:
        start, kind = r.pos, r.buf[r.pos]
        r.pos += 1
        if kind == 0:
            if body is not None:
                raise WireError(start, "second kind-0 body section")
            doc = r.document("body section")
            body = _command_fields(r, doc)
            sections.append(Section(0, doc.length))
        elif kind == 1:
            size = r.int32("document sequence size")
            if size < 5 or size > r.end - start - 1:
                raise WireError(start + 1, f"document sequence size {size} is out of range")
            seq = _Reader(r.buf, r.pos, start + 1 + size)
            identifier = seq.cstring("document sequence identifier")
            sections.append(Section(1, size, identifier, seq.documents(f"document in sequence {identifier!r}")))
            r.pos = seq.end
        else:
            raise WireError(start, f"unknown section kind {kind}")
    if body is None:
        raise WireError(r.pos, "OP_MSG has no kind-0 body section")
    return {
        "flags": flags,
        "more_to_come": bool(flags & MORE_TO_COME),
        "exhaust_allowed": bool(flags & EXHAUST_ALLOWED),
        "checksum_present": checksum_present,
        "checksum_ok": checksum_ok,
        "sections": tuple(sections),
        **body,
    }


def _decode_op_query(r: _Reader) -> dict[str, Any]:
    flags = r.int32("flags")
    namespace = r.cstring("fullCollectionName")
    r.int32("numberToSkip")
    r.int32("numberToReturn")
    query = r.document("query")
    if r.pos < r.end:
        r.document("returnFieldsSelector")
    r.expect_end("returnFieldsSelector")
    database, collection = _split_namespace(namespace)
    if collection != "$cmd":
        return {
            "flags": flags,
            "command": "find",
            "database": database,
            "collection": collection,
            "body_bson": r.bson(query),
        }
    first = query.first()
    if first is not None and first.key == "$query" and first.type == 0x03:  # wrapped with read preference
        query = r.scan(first.offset, first.offset + first.size, "$query")
    return {**_command_fields(r, query), "flags": flags, "database": database}


def _decode_op_reply(r: _Reader) -> dict[str, Any]:
    flags = r.int32("responseFlags")
    cursor_id = r.int64("cursorID")
    starting_from = r.int32("startingFrom")
    number_returned = r.int32("numberReturned")
    first = r.pos
    count = r.documents("reply document")
    if count != number_returned:
        raise WireError(32, f"numberReturned {number_returned} but {count} documents follow")
    body = r.buf[first : first + _I32.unpack_from(r.buf, first)[0]] if count else None
    return {
        "flags": flags,
        "cursor_id": cursor_id,
        "starting_from": starting_from,
        "number_returned": number_returned,
        "body_bson": body,
    }


def _legacy(command: str, flags: int | None, namespace: str) -> dict[str, Any]:
    database, collection = _split_namespace(namespace)
    return {"flags": flags, "command": command, "database": database, "collection": collection}


def _decode_op_insert(r: _Reader) -> dict[str, Any]:
    flags = r.int32("flags")
    namespace = r.cstring("fullCollectionName")
    if r.documents("inserted document") == 0:
        raise WireError(r.pos, "OP_INSERT carries no documents")
    return _legacy("insert", flags, namespace)


def _decode_op_update(r: _Reader) -> dict[str, Any]:
    r.int32("ZERO")
    namespace = r.cstring("fullCollectionName")
    flags = r.int32("flags")
    r.document("selector")
    r.document("update")
    r.expect_end("update")
    return _legacy("update", flags, namespace)


def _decode_op_delete(r: _Reader) -> dict[str, Any]:
    r.int32("ZERO")
    namespace = r.cstring("fullCollectionName")
    flags = r.int32("flags")
    r.document("selector")
    r.expect_end("selector")
    return _legacy("delete", flags, namespace)


def _decode_op_get_more(r: _Reader) -> dict[str, Any]:
    r.int32("ZERO")
    namespace = r.cstring("fullCollectionName")
    r.int32("numberToReturn")
    cursor_id = r.int64("cursorID")
    r.expect_end("cursorID")
    return {**_legacy("getMore", None, namespace), "cursor_id": cursor_id}


def _decode_op_kill_cursors(r: _Reader) -> dict[str, Any]:
    r.int32("ZERO")
    count = r.int32("numberOfCursorIDs")
    if count < 0 or count * 8 != r.end - r.pos:
        raise WireError(20, f"numberOfCursorIDs {count} but {r.end - r.pos} bytes of cursor ids follow")
    return {"command": "killCursors"}


_DECODERS = {
    OP_MSG: _decode_op_msg,
    OP_QUERY: _decode_op_query,
    OP_REPLY: _decode_op_reply,
    OP_INSERT: _decode_op_insert,
    OP_UPDATE: _decode_op_update,
    OP_DELETE: _decode_op_delete,
    OP_GET_MORE: _decode_op_get_more,
    OP_KILL_CURSORS: _decode_op_kill_cursors,
}


def _decompress(compressor: str, data: bytes, size: int) -> bytes | None:
    """Decompress `data`, never producing much more than `size` bytes; None if the codec is missing."""
    if compressor == "noop":
        return data
    if compressor == "zlib":
        inflater = zlib.decompressobj()
        out = inflater.decompress(data, size + 1)  # bounded: no decompression bombs
        if len(out) > size:
            raise ValueError(f"zlib stream inflates past uncompressedSize {size}")
        if not inflater.eof:
            raise ValueError("zlib stream is truncated")
        if inflater.unused_data:
            raise ValueError("trailing bytes after the zlib stream")
        return out
    try:  # imported per call (a dict hit once loaded), so a codec may be missing at run time
        module = importlib.import_module("snappy" if compressor == "snappy" else "zstandard")
    except ImportError:
        return None
    if compressor == "snappy":
        declared = _snappy_length(data)
        if declared != size:  # checked first, so the codec never allocates an attacker's size
            raise ValueError(f"snappy block declares {declared} bytes")
        try:
            return module.uncompress(data)
        except module.UncompressError as e:
            raise ValueError(str(e) or "corrupt snappy block") from None
    try:
        declared = module.frame_content_size(data)
        if declared not in (-1, size):
            raise ValueError(f"zstd frame declares {declared} bytes")
        return module.ZstdDecompressor().decompress(data, max_output_size=size)
    except (module.ZstdError, MemoryError) as e:   # a corrupt frame can ask for more than size
        raise ValueError(str(e) or "corrupt zstd frame") from None


def _snappy_length(data: bytes) -> int:
    """The varint uncompressed length that starts a raw snappy block."""
    result = 0
    for i, byte in enumerate(data[:5]):
        result |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            return result
    raise ValueError("bad snappy length preamble")


def _decode_compressed(buf: bytes, header: Header) -> Message:
    if len(buf) < HEADER_SIZE + _COMPRESSED_PREFIX.size:
        raise WireError(HEADER_SIZE, f"OP_COMPRESSED needs 9 bytes after the header, {len(buf) - HEADER_SIZE} left")
    original, size, compressor_id = _COMPRESSED_PREFIX.unpack_from(buf, HEADER_SIZE)
    if original not in OPCODES or original == OP_COMPRESSED:
        raise WireError(16, f"originalOpcode {original} cannot be compressed")
    if not 0 <= size <= MAX_MESSAGE_SIZE - HEADER_SIZE:
        raise WireError(20, f"uncompressedSize {size} is out of range")
    if compressor_id not in COMPRESSORS:
        raise WireError(24, f"unknown compressorId {compressor_id}")
    compressor = COMPRESSORS[compressor_id]
    try:
        payload = _decompress(compressor, buf[25:], size)
    except (ValueError, zlib.error) as exc:  # _decompress turns the codecs' own errors into ValueError
        raise WireError(25, f"{compressor} decompression failed: {exc}") from None
    marks: dict[str, Any] = {"compressed": True, "compressor": compressor, "original_opcode": original}
    if payload is None:
        note = f"{compressor} codec not installed; message not decompressed"
        return _message(header._replace(opcode=original), note=note, **marks)
    if len(payload) != size:
        raise WireError(20, f"uncompressedSize {size} but {compressor} produced {len(payload)} bytes")
    # Decode the wrapped message as if it had arrived with its original header.
    inner = Header(HEADER_SIZE + size, header.request_id, header.response_to, original)
    try:
        message = _decode_plain(_HEADER.pack(*inner) + payload, inner)
    except WireError as exc:
        raise WireError(25, f"in the decompressed {OPCODES[original]} at offset {exc.offset}: {exc.message}") from None
    return dataclasses.replace(message, length=header.length, **marks)


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1
        table.append(n)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the OP_MSG checksum. Pure Python: fine for the occasional message."""
    crc = 0xFFFFFFFF
    table = _CRC32C_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
