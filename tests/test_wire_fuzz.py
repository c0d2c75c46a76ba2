"""Property tests for mongoprobe.wire.decode: garbage and damaged messages never escape as anything
but WireError, the stream decoder never raises and accounts for every byte, and valid
traffic chopped at arbitrary points decodes to exactly the messages that were sent."""

from __future__ import annotations

import itertools
import struct

import bson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mongoprobe.wire.bson_scan import BsonError, scan_document
from mongoprobe.wire.decode import (
    EXHAUST_ALLOWED,
    MORE_TO_COME,
    OPCODES,
    Message,
    WireError,
    decode_message,
)
from mongoprobe.wire.encode import encode_op_compressed, encode_op_msg, encode_op_query, encode_op_reply
from mongoprobe.wire.stream import StreamDecoder
from helpers.wire_ops import op_delete, op_get_more, op_insert, op_kill_cursors, op_update

FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])

_PLAIN = [
    encode_op_msg(1, 0, {"hello": 1, "$db": "admin"}),
    encode_op_msg(2, 1, {"ok": 1.0, "cursor": {"id": 0, "firstBatch": [{"a": 1}]}}, flags=MORE_TO_COME),
    encode_op_msg(3, 0, {"insert": "c", "$db": "d"}, sequences=[("documents", [{"_id": i} for i in range(3)])]),
    encode_op_msg(4, 0, {"getMore": 7, "collection": "c", "$db": "d"}, flags=EXHAUST_ALLOWED, checksum=True),
    encode_op_query(5, 0, "admin.$cmd", {"isMaster": 1, "client": {"driver": {"name": "x"}}}),
    encode_op_query(6, 0, "d.$cmd", {"$query": {"count": "c"}, "$readPreference": {"mode": "nearest"}}),
    encode_op_query(7, 0, "d.c", {"x": {"$gt": 1}}, fields={"x": 1}),
    encode_op_reply(8, 5, [{"ok": 1.0, "ismaster": True}, {"n": 3}], cursor_id=12),
    op_insert(9, "d.c", [{"a": 1}, {"b": "two"}]),
    op_update(10, "d.c", {"a": 1}, {"$inc": {"a": 1}}),
    op_delete(11, "d.c", {"a": 1}),
    op_get_more(12, "d.c", 77),
    op_kill_cursors(13, [1, 2]),
]
# Every message again, compressed by each codec (request ids kept, so renumber them).
_COMPRESSED = [
    encode_op_compressed(raw[:4] + struct.pack("<i", 100 * (n + 1) + i) + raw[8:], codec)
    for n, codec in enumerate(["noop", "zlib", "snappy", "zstd"])
    for i, raw in enumerate(_PLAIN)
]
POOL = _PLAIN + _COMPRESSED


def decode_or_wire_error(buf: bytes) -> Message | None:
    """decode_message, which may raise only WireError; a decoded body must never raise either."""
    try:
        message = decode_message(buf)
    except WireError as exc:
        assert str(exc).startswith(f"offset {exc.offset}: ")
        return None
    message.body()
    return message


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[StreamDecoder, list[Message]]:
    """Feed `data` split at `cuts`, checking the byte accounting after every feed."""
    decoder, messages, fed = StreamDecoder(), [], 0
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(bounds):
        messages += decoder.feed(data[start:end])
        fed = end
        assert decoder.skipped_bytes + decoder.consumed_bytes + decoder.pending == fed
        assert decoder.consumed_bytes == sum(m.length for m in messages)
    decoder.close()
    assert decoder.skipped_bytes + decoder.consumed_bytes == len(data) and decoder.pending == 0
    return decoder, messages


# (a) random bytes


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes(data: bytes) -> None:
    decode_or_wire_error(data)


@FUZZ
@given(
    opcode=st.sampled_from(sorted(OPCODES)), body=st.binary(max_size=400), request_id=st.integers(-(2**31), 2**31 - 1)
)
def test_random_body_behind_a_valid_header(opcode: int, body: bytes, request_id: int) -> None:
    # A well-framed header gets the random bytes past decode_header, into the opcode decoders.
    message = decode_or_wire_error(struct.pack("<iiii", 16 + len(body), request_id, 0, opcode) + body)
    if message is not None:
        assert message.request_id == request_id and message.length == 16 + len(body)


@FUZZ
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(min_value=0), max_size=20))
def test_stream_of_random_bytes(data: bytes, cuts: list[int]) -> None:
    feed_in_pieces(data, cuts)


# (b) damaged valid messages

_mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.just(0)),
    st.tuples(st.just("truncate"), st.integers(min_value=0), st.just(0)),
)


@st.composite
def damaged(draw: st.DrawFn) -> bytes:
    raw = bytearray(draw(st.sampled_from(POOL)))
    for kind, at, value in draw(st.lists(_mutation, min_size=1, max_size=4)):
        at %= len(raw) + 1
        if kind == "flip" and at < len(raw):
            raw[at] ^= value
        elif kind == "insert":
            raw[at:at] = bytes([value])
        elif kind == "delete":
            del raw[at : at + 1]
        elif kind == "truncate":
            del raw[at:]
    if len(raw) >= 4 and draw(st.booleans()):
        struct.pack_into("<i", raw, 0, len(raw))  # keep the framing consistent, to reach the body decoders
    return bytes(raw)


@FUZZ
@given(damaged())
def test_damaged_message(raw: bytes) -> None:
    decode_or_wire_error(raw)


@FUZZ
@given(
    raw=damaged(),
    first=st.sampled_from(POOL),
    last=st.sampled_from(POOL),
    cuts=st.lists(st.integers(min_value=0), max_size=10),
)
def test_stream_with_a_damaged_message(raw: bytes, first: bytes, last: bytes, cuts: list[int]) -> None:
    _, messages = feed_in_pieces(first + raw + last, cuts)
    # The stream starts in sync, so the first message always comes out intact.
    assert messages and messages[0] == decode_message(first)


# (c) valid traffic, chopped anywhere


@FUZZ
@given(
    sent=st.lists(st.sampled_from(POOL), min_size=1, max_size=8), cuts=st.lists(st.integers(min_value=0), max_size=30)
)
def test_stream_returns_exactly_what_was_sent(sent: list[bytes], cuts: list[int]) -> None:
    decoder, messages = feed_in_pieces(b"".join(sent), cuts)
    assert messages == [decode_message(raw) for raw in sent]
    assert [(m.request_id, m.command) for m in messages] == [
        (struct.unpack_from("<i", raw, 4)[0], decode_message(raw).command) for raw in sent
    ]
    assert (decoder.skipped_bytes, decoder.errors) == (0, [])


# The BSON scanner against pymongo's decoder

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20).map(bson.Binary),
    st.datetimes().map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000)),
    st.just(bson.ObjectId("0123456789abcdef01234567")),
    st.just(bson.MinKey()),
    st.just(bson.MaxKey()),
    st.just(bson.Regex("^a.*", "i")),
    st.just(bson.Code("f()", {"x": 1})),
    st.just(bson.Timestamp(5, 1)),
    st.just(bson.Decimal128("1.5")),
)
_keys = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=8)
_documents = st.dictionaries(
    _keys,
    st.recursive(
        _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_keys, inner, max_size=3), max_leaves=8
    ),
    max_size=6,
)


@FUZZ
@given(_documents)
def test_scanner_reads_what_pymongo_wrote(doc: dict) -> None:
    raw = bson.encode(doc)
    scanned = scan_document(raw)
    assert scanned.length == len(raw)
    # pymongo moves a top-level "_id" to the front: compare with what it wrote
    written = bson.decode(raw)
    assert [e.key for e in scanned.elements] == list(written)
    for element, value in zip(scanned.elements, written.values(), strict=True):
        if type(value) in (str, bool, float, int):  # exact types: bson.Code is a str
            assert element.value == value


@FUZZ
@given(doc=_documents, flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(1, 255)), min_size=1, max_size=3))
def test_scanner_on_damaged_bson_raises_only_bson_error(doc: dict, flips: list[tuple[int, int]]) -> None:
    raw = bytearray(bson.encode(doc))
    for at, value in flips:
        raw[at % len(raw)] ^= value
    try:
        scanned = scan_document(bytes(raw))
    except BsonError as exc:
        assert 0 <= exc.offset < len(raw)
        return
    try:
        decoded = bson.decode(bytes(raw))
    except Exception:
        return  # pymongo checks nested documents too; the scanner reads only the top level
    assert [e.key for e in scanned.elements] == list(decoded)
