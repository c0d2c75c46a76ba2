"""A minimal, defensive scanner for the top level of a BSON document.

It follows the BSON 1.1 specification (bsonspec.org) but reads only what the wire decoder
needs: the top-level keys, their types, and the values of scalar fields (strings, int32,
int64, doubles, booleans). Embedded documents, arrays and every other type are skipped by
their declared size, after checking that size against the bytes actually available.

No length is trusted: every read is bounds-checked against the end of the enclosing
document, and any inconsistency raises `BsonError` naming the absolute byte offset in the
buffer, so that callers can report exactly where a message went wrong.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")

# Types whose value has a fixed size, in bytes.
_FIXED_SIZE = {
    0x01: 8,  # double
    0x06: 0,  # undefined
    0x07: 12,  # ObjectId
    0x08: 1,  # boolean
    0x09: 8,  # UTC datetime
    0x0A: 0,  # null
    0x10: 4,  # int32
    0x11: 8,  # timestamp
    0x12: 8,  # int64
    0x13: 16,  # decimal128
    0xFF: 0,  # min key
    0x7F: 0,  # max key
}
_STRING_TYPES = (0x02, 0x0D, 0x0E)  # string, JavaScript code, symbol
_DOCUMENT_TYPES = (0x03, 0x04)  # embedded document, array

Scalar = str | int | float | bool | None


class BsonError(ValueError):
    """Malformed BSON at `offset` (absolute, in the scanned buffer)."""

    def __init__(self, offset: int, message: str) -> None:
        super().__init__(f"offset {offset}: {message}")
        self.offset = offset
        self.message = message


@dataclass(frozen=True, slots=True)
class Element:
    """One top-level field: its key, BSON type byte, where its value lies, and scalar value."""

    key: str
    type: int
    offset: int  # absolute offset of the value's first byte
    size: int  # size of the value in bytes
    value: Scalar  # decoded for string/int32/int64/double/bool, else None


@dataclass(frozen=True, slots=True)
class Document:
    offset: int
    length: int
    elements: tuple[Element, ...]

    def first(self) -> Element | None:
        return self.elements[0] if self.elements else None

    def get(self, key: str) -> Element | None:
        return next((e for e in self.elements if e.key == key), None)

    def string(self, key: str) -> str | None:
        """The value of `key` if it is a BSON string, else None."""
        element = self.get(key)
        return element.value if element is not None and element.type == 0x02 else None  # type: ignore[return-value]


def document_length(buf: bytes, offset: int, end: int) -> int:
    """Validate the framing of the document at `offset` (length prefix fits before `end`,
    at least 5 bytes, trailing NUL) and return its length."""
    if end - offset < 5:
        raise BsonError(offset, f"document needs at least 5 bytes, {max(end - offset, 0)} left")
    (length,) = _INT32.unpack_from(buf, offset)
    if length < 5:
        raise BsonError(offset, f"document length {length} is smaller than the 5-byte minimum")
    if length > end - offset:
        raise BsonError(offset, f"document length {length} overruns the {end - offset} bytes left")
    if buf[offset + length - 1] != 0:
        raise BsonError(offset + length - 1, "document does not end with a NUL byte")
    return length


def scan_document(buf: bytes, offset: int = 0, end: int | None = None) -> Document:
    """Scan the top-level elements of the document at `offset`, which must end by `end`."""
    end = len(buf) if end is None else min(end, len(buf))
    length = document_length(buf, offset, end)
    doc_end = offset + length - 1  # position of the terminating NUL
    pos = offset + 4
    elements = []
    while pos < doc_end:
        type_byte = buf[pos]
        key, pos = _cstring(buf, pos + 1, doc_end, "key")
        size, value = _value(buf, type_byte, pos, doc_end, key)
        elements.append(Element(key, type_byte, pos, size, value))
        pos += size
    return Document(offset, length, tuple(elements))


def _cstring(buf: bytes, pos: int, end: int, what: str) -> tuple[str, int]:
    """Decode the NUL-terminated UTF-8 string at `pos`; returns it and the offset after the NUL."""
    nul = buf.find(b"\x00", pos, end)
    if nul < 0:
        raise BsonError(pos, f"{what} is not NUL-terminated within the document")
    return _utf8(buf[pos:nul], pos, what), nul + 1


def _utf8(raw: bytes, pos: int, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BsonError(pos + exc.start, f"{what} is not valid UTF-8") from None


def _string_size(buf: bytes, pos: int, end: int, key: str) -> int:
    """Size of a length-prefixed BSON string at `pos` (prefix included)."""
    if end - pos < 4:
        raise BsonError(pos, f"string length of {key!r} needs 4 bytes, {end - pos} left")
    (n,) = _INT32.unpack_from(buf, pos)
    if n < 1 or n > end - pos - 4:
        raise BsonError(pos, f"string length {n} of {key!r} is out of range ({end - pos - 4} bytes left)")
    if buf[pos + 4 + n - 1] != 0:
        raise BsonError(pos + 4 + n - 1, f"string {key!r} does not end with a NUL byte")
    return 4 + n


def _value(buf: bytes, type_byte: int, pos: int, end: int, key: str) -> tuple[int, Scalar]:
    """Size and (for scalars) value of the element of type `type_byte` at `pos`."""
    if type_byte in _FIXED_SIZE:
        size = _FIXED_SIZE[type_byte]
        if end - pos < size:
            raise BsonError(pos, f"value of {key!r} needs {size} bytes, {end - pos} left")
        if type_byte == 0x10:
            return size, _INT32.unpack_from(buf, pos)[0]
        if type_byte == 0x12:
            return size, _INT64.unpack_from(buf, pos)[0]
        if type_byte == 0x01:
            return size, _DOUBLE.unpack_from(buf, pos)[0]
        if type_byte == 0x08:
            if buf[pos] > 1:
                raise BsonError(pos, f"boolean {key!r} has byte {buf[pos]}, not 0 or 1")
            return size, buf[pos] == 1
        return size, None
    if type_byte in _STRING_TYPES:
        size = _string_size(buf, pos, end, key)
        text = _utf8(buf[pos + 4 : pos + size - 1], pos + 4, f"string {key!r}")
        return size, text if type_byte == 0x02 else None
    if type_byte in _DOCUMENT_TYPES:
        return document_length(buf, pos, end), None
    if type_byte == 0x05:  # binary: int32 length, subtype byte, bytes
        if end - pos < 5:
            raise BsonError(pos, f"binary {key!r} needs at least 5 bytes, {end - pos} left")
        (n,) = _INT32.unpack_from(buf, pos)
        if n < 0 or n > end - pos - 5:
            raise BsonError(pos, f"binary length {n} of {key!r} is out of range ({end - pos - 5} bytes left)")
        return 5 + n, None
    if type_byte == 0x0B:  # regular expression: two cstrings
        _, after = _cstring(buf, pos, end, f"regex pattern of {key!r}")
        _, after = _cstring(buf, after, end, f"regex options of {key!r}")
        return after - pos, None
    if type_byte == 0x0C:  # DBPointer: string, 12-byte ObjectId
        size = _string_size(buf, pos, end, key) + 12
        if size > end - pos:
            raise BsonError(pos, f"DBPointer {key!r} overruns the document")
        return size, None
    if type_byte == 0x0F:  # code with scope: int32 total, string, document
        if end - pos < 4:
            raise BsonError(pos, f"code-with-scope {key!r} needs 4 bytes, {end - pos} left")
        (total,) = _INT32.unpack_from(buf, pos)
        if total < 14 or total > end - pos:
            raise BsonError(pos, f"code-with-scope length {total} of {key!r} is out of range")
        inner = pos + 4 + _string_size(buf, pos + 4, pos + total, key)
        if inner + document_length(buf, inner, pos + total) != pos + total:
            raise BsonError(pos, f"code-with-scope {key!r} parts do not add up to {total} bytes")
        return total, None
    raise BsonError(pos - len(key.encode()) - 2, f"unknown BSON type 0x{type_byte:02x} for {key!r}")
