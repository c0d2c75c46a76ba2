"""Tests for mongoprobe.wire.decode: every opcode, OP_MSG sections and flags, OP_COMPRESSED codecs,
error offsets, the stream decoder, and bytes that pymongo itself puts on the wire."""

from __future__ import annotations

import contextlib
import datetime
import socket
import struct
import sys
import threading
import zlib
from collections.abc import Iterator

import bson
import pytest
from bson.codec_options import CodecOptions
from mongoprobe.wire import decode as wire
from mongoprobe.wire.bson_scan import BsonError, scan_document
from mongoprobe.wire.decode import (
    CHECKSUM_PRESENT,
    EXHAUST_ALLOWED,
    MORE_TO_COME,
    OP_COMPRESSED,
    OP_DELETE,
    OP_GET_MORE,
    OP_INSERT,
    OP_KILL_CURSORS,
    OP_MSG,
    OP_QUERY,
    OP_REPLY,
    OP_UPDATE,
    Header,
    Section,
    WireError,
    crc32c,
    decode_header,
    decode_message,
    opcode_name,
)
from mongoprobe.wire.encode import encode_op_compressed, encode_op_msg, encode_op_query, encode_op_reply
from mongoprobe.wire.stream import StreamDecoder, decode_stream
from pymongo import MongoClient
from pymongo.message import _op_msg

from helpers.wire_ops import cstr, frame, op_delete, op_get_more, op_insert, op_kill_cursors, op_update

CODECS = ["noop", "zlib", "snappy", "zstd"]


def kind1(identifier: str, docs: list[dict]) -> bytes:
    payload = cstr(identifier) + b"".join(bson.encode(d) for d in docs)
    return b"\x01" + struct.pack("<i", 4 + len(payload)) + payload


def kind0(doc: dict) -> bytes:
    return b"\x00" + bson.encode(doc)


def reframed(raw: bytes) -> bytes:
    """`raw` with its messageLength fixed up after an edit."""
    return struct.pack("<i", len(raw)) + raw[4:]


def error_text(buf: bytes) -> str:
    with pytest.raises(WireError) as info:
        decode_message(buf)
    assert isinstance(info.value, ValueError)
    assert str(info.value) == f"offset {info.value.offset}: {info.value.message}"
    return str(info.value)


# --- names and header -------------------------------------------------------------------


def test_opcode_names() -> None:
    assert wire.OPCODES[2013] == "OP_MSG" and wire.OPCODES[1] == "OP_REPLY"
    assert len(wire.OPCODES) == 9
    assert opcode_name(2012) == "OP_COMPRESSED"
    assert opcode_name(7) == "OP_UNKNOWN(7)"


def test_decode_header_at_offset() -> None:
    msg = encode_op_msg(42, 7, {"ping": 1, "$db": "admin"})
    assert decode_header(b"xx" + msg, offset=2) == Header(len(msg), 42, 7, OP_MSG)


@pytest.mark.parametrize(
    ("buf", "expected"),
    [
        (b"", "offset 0: header needs 16 bytes, 0 available"),
        (struct.pack("<iiii", 3, 1, 0, OP_MSG), "offset 0: messageLength 3 is smaller than the 16-byte header"),
        (
            struct.pack("<iiii", 48_000_001, 1, 0, OP_MSG),
            "offset 0: messageLength 48000001 exceeds the 48000000-byte maximum",
        ),
        (struct.pack("<iiii", 16, 1, 0, 7), "offset 12: unknown opcode 7"),
    ],
)
def test_header_errors_name_offsets(buf: bytes, expected: str) -> None:
    assert error_text(buf) == expected


# --- the BSON scanner ------------------------------------------------------------------------


def bson_doc(elements: bytes) -> bytes:
    return struct.pack("<i", 4 + len(elements) + 1) + elements + b"\x00"


def test_scanner_reads_every_type_pymongo_writes() -> None:
    doc = {
        "s": "text",
        "i": 7,
        "l": bson.Int64(2**40),
        "f": 1.5,
        "t": True,
        "n": None,
        "d": {"x": 1},
        "a": [1, 2],
        "b": bson.Binary(b"\x00\x01"),
        "o": bson.ObjectId(),
        "dt": datetime.datetime(2024, 1, 2),
        "re": bson.Regex("a+", "i"),
        "c": bson.Code("f()"),
        "cws": bson.Code("g()", {"y": 2}),
        "ts": bson.Timestamp(1, 2),
        "dec": bson.Decimal128("1.1"),
        "min": bson.MinKey(),
        "max": bson.MaxKey(),
        "ref": bson.DBRef("c", 1),
    }
    raw = b"xx" + bson.encode(doc)
    scanned = scan_document(raw, 2)
    assert (scanned.offset, scanned.length) == (2, len(raw) - 2)
    assert [e.key for e in scanned.elements] == list(doc)
    values = {e.key: e.value for e in scanned.elements}
    assert (values["s"], values["i"], values["l"], values["f"], values["t"]) == ("text", 7, 2**40, 1.5, True)
    assert values["c"] is None and scanned.string("s") == "text" and scanned.string("i") is None
    assert scanned.get("missing") is None and scanned.first().key == "s"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (bson_doc(b"\x08k\x00\x02"), "offset 7: boolean 'k' has byte 2, not 0 or 1"),
        (
            bson_doc(b"\x05k\x00" + struct.pack("<i", 100) + b"\x00ab"),
            "offset 7: binary length 100 of 'k' is out of range (2 bytes left)",
        ),
        (bson_doc(b"\x02k\x00" + struct.pack("<i", 3) + b"abc"), "offset 13: string 'k' does not end with a NUL byte"),
        (
            bson_doc(b"\x02k\x00" + struct.pack("<i", 50) + b"abc"),
            "offset 7: string length 50 of 'k' is out of range (3 bytes left)",
        ),
        (
            bson_doc(b"\x0ck\x00" + struct.pack("<i", 2) + b"a\x00" + b"\x00" * 11),
            "offset 7: DBPointer 'k' overruns the document",
        ),
        (
            bson_doc(b"\x0fk\x00" + struct.pack("<ii", 16, 2) + b"f\x00" + struct.pack("<i", 5) + b"\x00\x00"),
            "offset 7: code-with-scope 'k' parts do not add up to 16 bytes",
        ),
        (struct.pack("<i", 5) + b"\x01", "offset 4: document does not end with a NUL byte"),
        (struct.pack("<i", 4) + b"\x00", "offset 0: document length 4 is smaller than the 5-byte minimum"),
        (bson_doc(b"\x42k\x00"), "offset 4: unknown BSON type 0x42 for 'k'"),
        (bson_doc(b"\x10kkk"), "offset 5: key is not NUL-terminated within the document"),
        (bson_doc(b"\x10k\x00\x01\x00"), "offset 7: value of 'k' needs 4 bytes, 2 left"),
        (bson_doc(b"\x0a\xff\x00"), "offset 5: key is not valid UTF-8"),
        (
            bson_doc(b"\x03k\x00" + struct.pack("<i", 99) + b"\x00\x00"),
            "offset 7: document length 99 overruns the 6 bytes left",
        ),
    ],
)
def test_scanner_errors_name_offsets(raw: bytes, expected: str) -> None:
    with pytest.raises(BsonError) as info:
        scan_document(raw)
    assert str(info.value) == expected


# --- OP_MSG -------------------------------------------------------------------------------


def test_op_msg_find_round_trip() -> None:
    body = {"find": "people", "filter": {"age": {"$gt": 3}}, "$db": "shop"}
    msg = decode_message(encode_op_msg(11, 0, body))
    assert (msg.request_id, msg.response_to, msg.opcode, msg.opcode_name) == (11, 0, OP_MSG, "OP_MSG")
    assert (msg.command, msg.database, msg.collection) == ("find", "shop", "people")
    assert msg.sections == (Section(0, len(bson.encode(body))),)
    assert (msg.flags, msg.more_to_come, msg.exhaust_allowed, msg.checksum_present) == (0, False, False, False)
    assert msg.checksum_ok is None and not msg.compressed
    assert msg.body() == body


def test_op_msg_command_with_non_string_first_value_has_no_collection() -> None:
    msg = decode_message(encode_op_msg(1, 0, {"aggregate": 1, "pipeline": [], "$db": "admin"}))
    assert (msg.command, msg.database, msg.collection) == ("aggregate", "admin", None)


def test_op_msg_get_more_collection_comes_from_collection_field() -> None:
    msg = decode_message(encode_op_msg(1, 0, {"getMore": bson.Int64(123), "collection": "logs", "$db": "d"}))
    assert (msg.command, msg.database, msg.collection) == ("getMore", "d", "logs")


def test_op_msg_kind1_document_sequence() -> None:
    docs = [{"_id": i, "x": "y" * i} for i in range(3)]
    raw = encode_op_msg(5, 0, {"insert": "c", "$db": "db"}, sequences=[("documents", docs)])
    msg = decode_message(raw)
    assert (msg.command, msg.database, msg.collection) == ("insert", "db", "c")
    assert [s.kind for s in msg.sections] == [0, 1]
    seq = msg.sections[1]
    assert (seq.identifier, seq.documents) == ("documents", 3)
    assert seq.size == 4 + len(b"documents\x00") + sum(len(bson.encode(d)) for d in docs)


def test_op_msg_several_sequences_and_empty_sequence() -> None:
    raw = encode_op_msg(
        5,
        0,
        {"bulkWrite": 1, "$db": "admin"},
        sequences=[("ops", [{"insert": 0, "document": {}}] * 4), ("nsInfo", [{"ns": "a.b"}]), ("x", [])],
    )
    msg = decode_message(raw)
    assert [(s.identifier, s.documents) for s in msg.sections[1:]] == [("ops", 4), ("nsInfo", 1), ("x", 0)]


def test_op_msg_from_pymongo_itself_splits_documents_into_a_sequence() -> None:
    docs = [{"_id": i} for i in range(5)]
    request_id, raw, _, _ = _op_msg(
        0, {"insert": "things", "ordered": True, "documents": docs}, "inv", None, CodecOptions()
    )
    msg = decode_message(raw)
    assert msg.request_id == request_id
    assert (msg.command, msg.database, msg.collection) == ("insert", "inv", "things")
    assert [(s.kind, s.identifier, s.documents) for s in msg.sections] == [(0, None, 1), (1, "documents", 5)]


def test_op_msg_body_not_first() -> None:
    raw = frame(
        OP_MSG,
        struct.pack("<I", 0) + kind1("updates", [{"q": {}, "u": {}}] * 2) + kind0({"update": "coll", "$db": "db"}),
    )
    msg = decode_message(raw)
    assert (msg.command, msg.database, msg.collection) == ("update", "db", "coll")
    assert [(s.kind, s.identifier, s.documents) for s in msg.sections] == [(1, "updates", 2), (0, None, 1)]


def test_crc32c_known_vector() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the standard CRC-32C check value
    assert crc32c(b"") == 0


def test_op_msg_checksum() -> None:
    raw = encode_op_msg(9, 0, {"ping": 1, "$db": "admin"}, checksum=True)
    assert struct.unpack_from("<i", raw)[0] == len(raw)
    assert struct.unpack_from("<I", raw, len(raw) - 4)[0] == crc32c(raw[:-4])
    msg = decode_message(raw)
    assert (msg.checksum_present, msg.checksum_ok, msg.flags & CHECKSUM_PRESENT) == (True, True, 1)
    assert msg.command == "ping" and len(msg.sections) == 1
    corrupted = raw[:-1] + bytes([raw[-1] ^ 0xFF])
    assert decode_message(corrupted).checksum_ok is False


def test_op_msg_checksum_flag_without_room() -> None:
    raw = frame(OP_MSG, struct.pack("<I", CHECKSUM_PRESENT) + b"\x00\x00")
    assert error_text(raw) == "offset 20: no room for the 4-byte checksum"


@pytest.mark.parametrize(
    ("flags", "more", "exhaust"),
    [(MORE_TO_COME, True, False), (EXHAUST_ALLOWED, False, True), (MORE_TO_COME | EXHAUST_ALLOWED, True, True)],
)
def test_op_msg_more_to_come_and_exhaust_bits(flags: int, more: bool, exhaust: bool) -> None:
    msg = decode_message(encode_op_msg(3, 2, {"hello": 1, "$db": "admin"}, flags=flags))
    assert (msg.flags, msg.more_to_come, msg.exhaust_allowed) == (flags, more, exhaust)


def test_op_msg_unknown_optional_flag_bits_are_accepted() -> None:
    assert decode_message(encode_op_msg(3, 2, {"hello": 1}, flags=1 << 20)).flags == 1 << 20


def test_op_msg_errors_name_offsets() -> None:
    body = bson.encode({"ping": 1})
    assert error_text(frame(OP_MSG, struct.pack("<I", 1 << 2) + b"\x00" + body)) == (
        "offset 16: unknown required flag bits in flagBits 0x00000004"
    )
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + b"\x02" + body)) == "offset 20: unknown section kind 2"
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + kind1("documents", [{}]))) == (
        "offset 40: OP_MSG has no kind-0 body section"
    )
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + b"\x00" + body + b"\x00" + body)) == (
        f"offset {21 + len(body)}: second kind-0 body section"
    )
    assert error_text(frame(OP_MSG, struct.pack("<I", 0))) == "offset 20: OP_MSG has no kind-0 body section"
    overrun = b"\x00" + struct.pack("<i", 1000) + body[4:]
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + overrun)) == (
        f"offset 21: body section: document length 1000 overruns the {len(body)} bytes left"
    )
    bad_seq = b"\x01" + struct.pack("<i", 999) + b"documents\x00"
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + kind0({"a": 1}) + bad_seq)) == (
        f"offset {21 + len(bson.encode({'a': 1})) + 1}: document sequence size 999 is out of range"
    )
    bad_type = b"\x00" + struct.pack("<i", 9) + b"\x42x\x00\x00\x00"  # type 0x42 does not exist
    assert error_text(frame(OP_MSG, struct.pack("<I", 0) + bad_type)) == (
        "offset 25: body section: unknown BSON type 0x42 for 'x'"
    )


def test_message_length_must_match_buffer() -> None:
    raw = encode_op_msg(1, 0, {"ping": 1})
    assert error_text(raw[:-1]) == f"offset 0: messageLength {len(raw)} but {len(raw) - 1} bytes given"


# --- OP_QUERY / OP_REPLY / legacy ---------------------------------------------------------------


def test_op_query_legacy_handshake_is_master() -> None:
    # The shape of pre-OP_MSG drivers' handshake (pymongo < 4.x sent exactly this).
    query = {"isMaster": 1, "helloOk": True, "client": {"driver": {"name": "PyMongo", "version": "3.13"}}}
    raw = encode_op_query(77, 0, "admin.$cmd", query, flags=4, limit=-1)
    msg = decode_message(raw)
    assert (msg.opcode, msg.opcode_name, msg.request_id, msg.flags) == (OP_QUERY, "OP_QUERY", 77, 4)
    assert (msg.command, msg.database, msg.collection) == ("isMaster", "admin", None)
    assert msg.body() == query


def test_op_query_unwraps_dollar_query() -> None:
    query = {"$query": {"count": "events", "query": {}}, "$readPreference": {"mode": "secondaryPreferred"}}
    msg = decode_message(encode_op_query(1, 0, "metrics.$cmd", query))
    assert (msg.command, msg.database, msg.collection) == ("count", "metrics", "events")
    assert msg.body() == {"count": "events", "query": {}}


def test_op_query_on_a_collection_is_a_legacy_find() -> None:
    raw = encode_op_query(2, 0, "shop.orders.archive", {"status": "open"}, skip=5, limit=10, fields={"_id": 1})
    msg = decode_message(raw)
    assert (msg.command, msg.database, msg.collection) == ("find", "shop", "orders.archive")


def test_op_query_errors_name_offsets() -> None:
    assert error_text(frame(OP_QUERY, struct.pack("<i", 0) + b"admin.$cmd")) == (
        "offset 20: fullCollectionName is not NUL-terminated"
    )
    raw = reframed(encode_op_query(2, 0, "a.$cmd", {"ping": 1}) + b"\x01\x02")
    assert error_text(raw) == f"offset {len(raw) - 2}: returnFieldsSelector: document needs at least 5 bytes, 2 left"
    wrapped = bytearray(encode_op_query(2, 0, "a.$cmd", {"$query": {"ping": 1}}))
    inner_at = wrapped.index(bson.encode({"ping": 1}))
    wrapped[inner_at + 4] = 0x42  # corrupt the type byte of "ping" inside $query
    assert error_text(bytes(wrapped)) == f"offset {inner_at + 4}: $query: unknown BSON type 0x42 for 'ping'"


def test_op_reply_round_trip() -> None:
    docs = [{"ok": 1.0, "ismaster": True}, {"n": 2}]
    msg = decode_message(encode_op_reply(500, 77, docs, flags=8, cursor_id=2**40, starting_from=3))
    assert (msg.opcode_name, msg.request_id, msg.response_to) == ("OP_REPLY", 500, 77)
    assert (msg.flags, msg.cursor_id, msg.starting_from, msg.number_returned) == (8, 2**40, 3, 2)
    assert msg.command is None and msg.body() == docs[0]
    assert decode_message(encode_op_reply(1, 0, [])).number_returned == 0


def test_op_reply_count_mismatch() -> None:
    raw = bytearray(encode_op_reply(1, 0, [{"ok": 1}]))
    raw[32:36] = struct.pack("<i", 2)
    assert error_text(bytes(raw)) == "offset 32: numberReturned 2 but 1 documents follow"


@pytest.mark.parametrize(
    ("raw", "opcode", "command", "database", "collection"),
    [
        (op_insert(1, "db.c", [{"a": 1}, {"b": 2}]), OP_INSERT, "insert", "db", "c"),
        (op_update(2, "db.c", {"a": 1}, {"$set": {"b": 2}}, flags=1), OP_UPDATE, "update", "db", "c"),
        (op_delete(3, "db.sub.c", {"a": 1}), OP_DELETE, "delete", "db", "sub.c"),
        (op_get_more(4, "db.c", 99), OP_GET_MORE, "getMore", "db", "c"),
        (op_kill_cursors(5, [1, 2, 3]), OP_KILL_CURSORS, "killCursors", None, None),
    ],
)
def test_legacy_opcodes(raw: bytes, opcode: int, command: str, database: str | None, collection: str | None) -> None:
    msg = decode_message(raw)
    assert (msg.opcode, msg.opcode_name, msg.length) == (opcode, wire.OPCODES[opcode], len(raw))
    assert (msg.command, msg.database, msg.collection) == (command, database, collection)
    if opcode == OP_UPDATE:
        assert msg.flags == 1
    if opcode == OP_GET_MORE:
        assert msg.cursor_id == 99


def test_legacy_errors_name_offsets() -> None:
    assert error_text(op_insert(1, "db.c", [])) == "offset 25: OP_INSERT carries no documents"
    raw = op_kill_cursors(5, [1, 2])
    raw = raw[:20] + struct.pack("<i", 3) + raw[24:]
    assert error_text(raw) == "offset 20: numberOfCursorIDs 3 but 16 bytes of cursor ids follow"
    trailing = frame(OP_DELETE, op_delete(3, "db.c", {})[16:] + b"\x00")
    assert error_text(trailing) == f"offset {len(trailing) - 1}: 1 unexpected bytes after selector"


# --- OP_COMPRESSED ----------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize(
    "inner",
    [
        encode_op_msg(321, 12, {"insert": "c", "$db": "db"}, sequences=[("documents", [{"x": "a" * 200}] * 10)]),
        encode_op_msg(322, 0, {"ping": 1, "$db": "admin"}, checksum=True),
        encode_op_query(323, 0, "admin.$cmd", {"isMaster": 1}),
        encode_op_reply(324, 99, [{"ok": 1.0}], cursor_id=7),
    ],
    ids=["op_msg_insert", "op_msg_checksum", "op_query", "op_reply"],
)
def test_op_compressed_round_trip(codec: str, inner: bytes) -> None:
    raw = encode_op_compressed(inner, codec)
    assert struct.unpack_from("<i", raw, 12)[0] == OP_COMPRESSED
    plain, msg = decode_message(inner), decode_message(raw)
    assert (msg.compressed, msg.compressor, msg.original_opcode, msg.length) == (True, codec, plain.opcode, len(raw))
    # Apart from the compression marks, the wrapped message decodes exactly as it does uncompressed.
    assert msg == wire.dataclasses.replace(
        plain, compressed=True, compressor=codec, original_opcode=plain.opcode, length=len(raw)
    )


def test_op_compressed_unknown_compressor() -> None:
    raw = bytearray(encode_op_compressed(encode_op_msg(1, 0, {"ping": 1}), "noop"))
    raw[24] = 9
    assert error_text(bytes(raw)) == "offset 24: unknown compressorId 9"


def test_op_compressed_errors_name_offsets() -> None:
    inner = encode_op_msg(1, 0, {"ping": 1, "$db": "admin"})
    good = encode_op_compressed(inner, "zlib")

    def patched(at: int, fmt: str, value: int) -> bytes:
        raw = bytearray(good)
        struct.pack_into(fmt, raw, at, value)
        return bytes(raw)

    assert error_text(patched(16, "<i", OP_COMPRESSED)) == "offset 16: originalOpcode 2012 cannot be compressed"
    assert error_text(patched(16, "<i", 5)) == "offset 16: originalOpcode 5 cannot be compressed"
    assert error_text(patched(20, "<i", -1)) == "offset 20: uncompressedSize -1 is out of range"
    size = len(inner) - 16
    assert error_text(patched(20, "<i", size + 3)) == (
        f"offset 20: uncompressedSize {size + 3} but zlib produced {size} bytes"
    )
    assert error_text(patched(20, "<i", size - 3)) == (
        f"offset 25: zlib decompression failed: zlib stream inflates past uncompressedSize {size - 3}"
    )
    assert error_text(reframed(good[:25] + b"not zlib at all")).startswith("offset 25: zlib decompression failed: ")
    assert error_text(reframed(good[:-2])) == "offset 25: zlib decompression failed: zlib stream is truncated"
    assert (
        error_text(frame(OP_COMPRESSED, b"\x00" * 8))
        == "offset 16: OP_COMPRESSED needs 9 bytes after the header, 8 left"
    )
    broken_inner = frame(OP_MSG, struct.pack("<I", 0) + b"\x07")
    assert error_text(encode_op_compressed(broken_inner, "zlib")) == (
        "offset 25: in the decompressed OP_MSG at offset 20: unknown section kind 7"
    )


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_op_compressed_rejects_declared_size_mismatch_before_decompressing(codec: str) -> None:
    raw = bytearray(encode_op_compressed(encode_op_msg(1, 0, {"ping": 1, "$db": "admin"}), codec))
    struct.pack_into("<i", raw, 20, 1_000_000)
    assert error_text(bytes(raw)).startswith(f"offset 25: {codec} decompression failed: {codec} ")


def test_zlib_bomb_is_bounded() -> None:
    payload = zlib.compress(b"\x00" * 20_000_000)  # ~20 KB expanding to 20 MB
    raw = frame(OP_COMPRESSED, struct.pack("<iiB", OP_MSG, 100, 2) + payload)
    assert error_text(raw) == "offset 25: zlib decompression failed: zlib stream inflates past uncompressedSize 100"


@pytest.mark.parametrize(("codec", "module"), [("snappy", "snappy"), ("zstd", "zstandard")])
def test_op_compressed_missing_codec_is_a_note_not_an_error(
    codec: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    raw = encode_op_compressed(encode_op_msg(31, 30, {"ping": 1, "$db": "admin"}), codec)
    monkeypatch.setitem(sys.modules, module, None)  # makes `import module` fail
    msg = decode_message(raw)
    assert (msg.request_id, msg.response_to, msg.opcode, msg.original_opcode) == (31, 30, OP_MSG, OP_MSG)
    assert (msg.compressed, msg.compressor, msg.command, msg.length) == (True, codec, None, len(raw))
    assert msg.note == f"{codec} codec not installed; message not decompressed"


# --- the stream decoder ---------------------------------------------------------------------------

STREAM = [
    encode_op_msg(1, 0, {"hello": 1, "$db": "admin"}),
    encode_op_msg(2, 1, {"ok": 1.0, "isWritablePrimary": True}),
    encode_op_compressed(encode_op_msg(3, 0, {"find": "c", "$db": "d"}), "zlib"),
    encode_op_query(4, 0, "admin.$cmd", {"isMaster": 1}),
    encode_op_reply(5, 4, [{"ok": 1.0}]),
]
STREAM_BYTES = b"".join(STREAM)


def ids(messages: list[wire.Message]) -> list[int]:
    return [m.request_id for m in messages]


def test_stream_several_messages_in_one_feed() -> None:
    decoder = StreamDecoder()
    messages = decoder.feed(STREAM_BYTES)
    assert ids(messages) == [1, 2, 3, 4, 5]
    assert [m.command for m in messages] == ["hello", "ok", "find", "isMaster", None]
    assert (decoder.skipped_bytes, decoder.pending, decoder.consumed_bytes) == (0, 0, len(STREAM_BYTES))
    assert decoder.errors == []


def test_stream_byte_by_byte() -> None:
    decoder = StreamDecoder()
    got = []
    for i in range(len(STREAM_BYTES)):
        got += decoder.feed(STREAM_BYTES[i : i + 1])
        assert decoder.pending + decoder.consumed_bytes == i + 1
    assert ids(got) == [1, 2, 3, 4, 5]
    assert (decoder.skipped_bytes, decoder.pending, decoder.errors) == (0, 0, [])


def test_stream_header_split_in_the_middle() -> None:
    first = STREAM[0]
    decoder = StreamDecoder()
    assert decoder.feed(first[:7]) == [] and decoder.pending == 7
    assert decoder.feed(first[7:12]) == [] and decoder.pending == 12
    assert decoder.feed(first[12:30]) == [] and decoder.pending == 30
    assert ids(decoder.feed(first[30:] + STREAM[1][:3])) == [1]
    assert decoder.pending == 3
    assert ids(decoder.feed(STREAM[1][3:])) == [2]
    assert (decoder.pending, decoder.skipped_bytes) == (0, 0)


def test_stream_garbage_prefix_is_skipped_exactly() -> None:
    garbage = b"\xee" * 37 + b"not a header at all"
    decoder = StreamDecoder()
    assert ids(decoder.feed(garbage + STREAM_BYTES)) == [1, 2, 3, 4, 5]
    assert decoder.skipped_bytes == len(garbage)
    assert [str(e) for e in decoder.errors] == ["offset 0: messageLength -286331154 is out of range"]


def test_stream_garbage_in_the_middle() -> None:
    garbage = bytes(range(200, 256)) * 3
    data = STREAM[0] + STREAM[1] + garbage + STREAM[2] + STREAM[3]
    decoder = StreamDecoder()
    got = []
    for i in range(0, len(data), 50):
        got += decoder.feed(data[i : i + 50])
    assert ids(got) == [1, 2, 3, 4]
    assert decoder.skipped_bytes == len(garbage) and decoder.pending == 0
    assert len(decoder.errors) == 1 and decoder.errors[0].offset == len(STREAM[0]) + len(STREAM[1])


def test_stream_skips_a_well_framed_but_corrupt_message() -> None:
    bad = bytearray(STREAM[2])
    bad[24] = 9  # unknown compressorId
    data = STREAM[0] + bytes(bad) + STREAM[1]
    messages, skipped = decode_stream(data)
    assert ids(messages) == [1, 2] and skipped == len(bad)
    decoder = StreamDecoder()
    decoder.feed(data)
    assert [str(e) for e in decoder.errors] == [f"offset {len(STREAM[0]) + 24}: unknown compressorId 9"]


def test_stream_pending_and_close() -> None:
    decoder = StreamDecoder()
    assert ids(decoder.feed(STREAM[0] + STREAM[1][:20])) == [1]
    assert decoder.pending == 20
    assert decoder.close() == 20
    assert (decoder.pending, decoder.skipped_bytes) == (0, 20)
    assert str(decoder.errors[-1]) == f"offset {len(STREAM[0])}: stream ends inside a message (20 bytes left)"
    assert decode_stream(STREAM[0] + STREAM[1][:20]) == ([decode_message(STREAM[0])], 20)


def test_stream_tail_holds_back_only_bytes_that_may_start_a_header() -> None:
    decoder = StreamDecoder()
    decoder.feed(STREAM[0] + b"\xff" * 6)
    # Offsets 0-2 of the tail read a negative messageLength; the last 3 bytes could still
    # start one (ff ff ff 00 is 16 MiB), so they wait for more input.
    assert (decoder.pending, decoder.skipped_bytes) == (3, 3)
    assert ids(decoder.feed(b"\x00" + STREAM[1])) == [2]
    assert (decoder.pending, decoder.skipped_bytes) == (0, 7)


def test_stream_false_header_does_not_hold_up_later_messages() -> None:
    # After message 1, a lost-bytes gap leaves something that reads as a header claiming 1 MB.
    fake = struct.pack("<iiii", 1_000_000, 7, 1, OP_REPLY)
    decoder = StreamDecoder()
    got = decoder.feed(STREAM[0] + fake)
    assert ids(got) == [1] and decoder.pending == 16
    got = decoder.feed(STREAM[1] + STREAM[2])
    assert ids(got) == [2, 3]
    assert (decoder.skipped_bytes, decoder.pending) == (16, 0)
    assert [str(e) for e in decoder.errors] == [
        f"offset {len(STREAM[0])}: header never completed; a message follows at offset {len(STREAM[0]) + 16}"
    ]


def test_stream_large_message_in_small_chunks() -> None:
    docs = [{"_id": i, "payload": "p" * 100} for i in range(2000)]
    big = encode_op_msg(9, 0, {"insert": "c", "$db": "d"}, sequences=[("documents", docs)])
    data = big + STREAM[0]
    decoder = StreamDecoder()
    got = []
    for i in range(0, len(data), 4096):
        got += decoder.feed(data[i : i + 4096])
    assert ids(got) == [9, 1] and got[0].sections[1].documents == 2000
    assert (decoder.skipped_bytes, decoder.pending, decoder.errors) == (0, 0, [])


# --- what pymongo 4.20 really sends -------------------------------------------------------------

HELLO_REPLY = {
    "ok": 1.0,
    "helloOk": True,
    "isWritablePrimary": True,
    "ismaster": True,
    "maxWireVersion": 21,
    "minWireVersion": 0,
    "maxBsonObjectSize": 16 * 1024 * 1024,
    "maxMessageSizeBytes": 48_000_000,
    "maxWriteBatchSize": 100_000,
    "logicalSessionTimeoutMinutes": 30,
    "connectionId": 1,
}


@contextlib.contextmanager
def fake_server(compression: list[str]) -> Iterator[tuple[int, list[wire.Message]]]:
    """A localhost server that answers every hello with HELLO_REPLY, anything else with {ok: 1},
    using this module's encoder, and records every request the stream decoder finds."""
    seen: list[wire.Message] = []
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        decoder = StreamDecoder()
        with conn, contextlib.suppress(OSError):  # the client may reset the connection on close
            while data := conn.recv(65536):
                for request in decoder.feed(data):
                    seen.append(request)
                    hello = request.command in ("hello", "ismaster", "isMaster")
                    reply = {
                        **HELLO_REPLY,
                        "compression": compression,
                        "localTime": datetime.datetime.now(datetime.UTC),
                    }
                    conn.sendall(
                        encode_op_msg(request.request_id + 1, request.request_id, reply if hello else {"ok": 1.0})
                    )

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return  # listener closed
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield listener.getsockname()[1], seen
    finally:
        listener.close()


def test_pymongo_handshake_is_op_msg_ismaster_on_admin() -> None:
    with fake_server([]) as (port, seen):
        client = MongoClient("127.0.0.1", port, directConnection=True, serverSelectionTimeoutMS=5000)
        try:
            assert client.admin.command("ping") == {"ok": 1.0}
        finally:
            client.close()
    handshake = seen[0]
    # pymongo 4.20 sends its first hello as OP_MSG (not OP_QUERY), with the legacy lowercase
    # command name and helloOk, until the server says helloOk.
    assert (handshake.opcode_name, handshake.command, handshake.database) == ("OP_MSG", "ismaster", "admin")
    assert handshake.collection is None and not handshake.compressed
    body = handshake.body()
    assert body is not None and body["helloOk"] is True and body["client"]["driver"]["name"].startswith("PyMongo")
    assert "ping" in [m.command for m in seen]


@pytest.mark.parametrize("codec", ["zlib", "snappy"])
def test_pymongo_compressed_commands(codec: str) -> None:
    with fake_server([codec]) as (port, seen):
        client = MongoClient("127.0.0.1", port, directConnection=True, serverSelectionTimeoutMS=5000, compressors=codec)
        try:
            client.admin.command("ping")
        finally:
            client.close()
    ping = next(m for m in seen if m.command == "ping")
    assert (ping.opcode, ping.compressed, ping.compressor, ping.original_opcode) == (OP_MSG, True, codec, OP_MSG)
    assert ping.database == "admin"
    handshakes = [m for m in seen if m.command == "ismaster"]
    assert handshakes and not any(m.compressed for m in handshakes)  # the spec forbids compressing hello


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_op_compressed_corrupt_body_is_a_wire_error(codec: str) -> None:
    """A body the codec itself refuses (snappy's UncompressError, zstd's ZstdError or
    the MemoryError of a frame asking for more) is an error at the body's offset."""
    inner = encode_op_msg(1, 0, {"ping": 1, "$db": "admin", "pad": "x" * 300})
    raw = bytearray(encode_op_compressed(inner, codec))
    # snappy: after the 2-byte length, a copy from far before the output's start;
    # zstd: after the magic number, a frame header with its reserved bit set
    at, patch = (27, b"\xfe\xff\xff\xff\xff") if codec == "snappy" else (29, b"\xff" * 4)
    raw[at:at + len(patch)] = patch
    assert error_text(bytes(raw)).startswith(f"offset 25: {codec} decompression failed: ")
