"""Encoders of MongoDB wire messages: real messages for the tests, the test servers and
the sample recorders (``wire.py`` decodes them). The legacy write opcodes have none:
only old drivers send them, and the tests build those bytes by hand."""

from __future__ import annotations

import importlib
import struct
import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import bson

from mongoprobe.wire.decode import (CHECKSUM_PRESENT, COMPRESSORS, HEADER_SIZE, OP_COMPRESSED, OP_MSG,
                             OP_QUERY, OP_REPLY, _COMPRESSED_PREFIX, _HEADER, _I32, _U32, crc32c)

def _frame(request_id: int, response_to: int, opcode: int, body: bytes) -> bytes:
    return _HEADER.pack(HEADER_SIZE + len(body), request_id, response_to, opcode) + body


def encode_op_msg(
    request_id: int,
    response_to: int,
    body: Mapping[str, Any],
    flags: int = 0,
    sequences: Iterable[tuple[str, Sequence[Mapping[str, Any]]]] = (),
    checksum: bool = False,
    sequences_first: bool = False,
) -> bytes:
    """OP_MSG with `body` as the kind-0 section, then one kind-1 section per (identifier, docs)
    (before the body with `sequences_first`: the specification allows any order).
    `checksum` sets (or clears) checksumPresent in `flags` and appends the CRC-32C."""
    parts = []
    for identifier, docs in sequences:
        payload = identifier.encode() + b"\x00" + b"".join(bson.encode(d) for d in docs)
        parts.append(b"\x01" + _I32.pack(4 + len(payload)) + payload)
    parts.insert(len(parts) if sequences_first else 0, b"\x00" + bson.encode(body))
    flags = flags | CHECKSUM_PRESENT if checksum else flags & ~CHECKSUM_PRESENT
    trailer = b"\x00" * 4 if checksum else b""  # placeholder, so messageLength covers the checksum
    message = _frame(request_id, response_to, OP_MSG, _U32.pack(flags) + b"".join(parts) + trailer)
    return message[:-4] + _U32.pack(crc32c(message[:-4])) if checksum else message


def encode_op_query(
    request_id: int,
    response_to: int,
    namespace: str,
    query: Mapping[str, Any],
    flags: int = 0,
    skip: int = 0,
    limit: int = -1,
    fields: Mapping[str, Any] | None = None,
) -> bytes:
    body = _I32.pack(flags) + namespace.encode() + b"\x00" + struct.pack("<ii", skip, limit) + bson.encode(query)
    return _frame(request_id, response_to, OP_QUERY, body + (bson.encode(fields) if fields is not None else b""))


def encode_op_reply(
    request_id: int,
    response_to: int,
    documents: Sequence[Mapping[str, Any]] = (),
    flags: int = 0,
    cursor_id: int = 0,
    starting_from: int = 0,
) -> bytes:
    prefix = struct.pack("<iqii", flags, cursor_id, starting_from, len(documents))
    return _frame(request_id, response_to, OP_REPLY, prefix + b"".join(bson.encode(d) for d in documents))


def encode_op_compressed(inner: bytes, compressor: str) -> bytes:
    """Wrap the complete message `inner` in OP_COMPRESSED, keeping its requestID and responseTo."""
    _, request_id, response_to, opcode = _HEADER.unpack_from(inner)
    payload = inner[HEADER_SIZE:]
    compressor_id = {name: i for i, name in COMPRESSORS.items()}[compressor]
    if compressor == "zlib":
        data = zlib.compress(payload)
    elif compressor == "snappy":
        data = importlib.import_module("snappy").compress(payload)
    elif compressor == "zstd":
        data = importlib.import_module("zstandard").ZstdCompressor().compress(payload)
    else:
        data = payload
    prefix = _COMPRESSED_PREFIX.pack(opcode, len(payload), compressor_id)
    return _frame(request_id, response_to, OP_COMPRESSED, prefix + data)
