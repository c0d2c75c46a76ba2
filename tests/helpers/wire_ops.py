"""Wire messages built by hand: a frame around a body, and the legacy write/cursor
opcodes as pre-3.6 drivers sent them."""

from __future__ import annotations

import struct

import bson

from mongoprobe.wire.decode import OP_DELETE, OP_GET_MORE, OP_INSERT, OP_KILL_CURSORS, OP_UPDATE


def frame(opcode: int, body: bytes, request_id: int = 1, response_to: int = 0) -> bytes:
    return struct.pack("<iiii", 16 + len(body), request_id, response_to, opcode) + body


def cstr(text: str) -> bytes:
    return text.encode() + b"\x00"


# Legacy write/cursor opcodes, built by hand as pre-3.6 drivers sent them.
def op_insert(request_id: int, ns: str, docs: list[dict], flags: int = 0) -> bytes:
    return frame(OP_INSERT, struct.pack("<i", flags) + cstr(ns) + b"".join(bson.encode(d) for d in docs), request_id)


def op_update(request_id: int, ns: str, selector: dict, update: dict, flags: int = 0) -> bytes:
    body = struct.pack("<i", 0) + cstr(ns) + struct.pack("<i", flags) + bson.encode(selector) + bson.encode(update)
    return frame(OP_UPDATE, body, request_id)


def op_delete(request_id: int, ns: str, selector: dict, flags: int = 0) -> bytes:
    return frame(
        OP_DELETE, struct.pack("<i", 0) + cstr(ns) + struct.pack("<i", flags) + bson.encode(selector), request_id
    )


def op_get_more(request_id: int, ns: str, cursor_id: int) -> bytes:
    return frame(OP_GET_MORE, struct.pack("<i", 0) + cstr(ns) + struct.pack("<iq", 10, cursor_id), request_id)


def op_kill_cursors(request_id: int, cursor_ids: list[int]) -> bytes:
    return frame(OP_KILL_CURSORS, struct.pack(f"<ii{len(cursor_ids)}q", 0, len(cursor_ids), *cursor_ids), request_id)
