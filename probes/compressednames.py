#!/usr/bin/python3
"""compressednames.py - the command name of an OP_COMPRESSED request from its first bytes.

Used by mongolatency.py (bcc: the request's first 128 bytes) and by the analyzer's
reader of mongo_latency.bt's events (the body's first 40 bytes): standard library
only, so it runs under the system python3 the bcc tools use. Decodes as far as the
bytes go: snappy (a small decoder of its own), zlib; zstd only with the zstandard
module and a whole block in the bytes.

USAGE: compressed_command(message_prefix, bytes_available) -> bytes | None
"""

import struct
import zlib

def snappy_prefix(data):
    """What a raw snappy block's first bytes decode to (as far as they go)."""
    i = 0
    while i < len(data) and data[i] & 0x80:     # the uncompressed length (varint)
        i += 1
    i += 1
    out = bytearray()
    while i < len(data):
        tag = data[i]
        kind = tag & 3
        if kind == 0:                           # literal
            n = tag >> 2
            if n < 60:
                n, i = n + 1, i + 1
            else:
                w = n - 59
                if i + 1 + w > len(data):
                    break
                n = int.from_bytes(data[i + 1:i + 1 + w], "little") + 1
                i += 1 + w
            out += data[i:i + n]
            i += n
            continue
        if kind == 1:
            if i + 2 > len(data):
                break
            n, off = ((tag >> 2) & 7) + 4, ((tag >> 5) << 8) | data[i + 1]
            i += 2
        else:
            w = 2 if kind == 2 else 4
            if i + 1 + w > len(data):
                break
            n, off = (tag >> 2) + 1, int.from_bytes(data[i + 1:i + 1 + w], "little")
            i += 1 + w
        if off == 0 or off > len(out):
            break
        for _ in range(n):
            out.append(out[-off])
    return bytes(out)


def decompress_prefix(compressor, data):
    """The first bytes of a compressed body (None when this codec cannot be
    read here: zstd needs the zstandard module, and a whole block)."""
    if compressor == 0:
        return data
    if compressor == 1:
        return snappy_prefix(data)
    if compressor == 2:
        try:
            return zlib.decompressobj().decompress(data)   # a cut stream ends early
        except zlib.error:
            return None
    if compressor == 3:
        try:
            import zstandard
        except ImportError:
            return None
        try:
            return zstandard.ZstdDecompressor().decompressobj().decompress(data)
        except zstandard.ZstdError:
            return None
    return None


def cstring(b, at):
    end = b.find(b"\0", at)
    return b[at:end] if end >= 0 else None


def compressed_command(pfx, have):
    """The command name (bytes, at most 24) of an OP_COMPRESSED request from its
    first bytes, or None. Message: header(16), originalOpcode(4),
    uncompressedSize(4), compressorId(1), the compressed body."""
    if have < 26:
        return None
    orig = struct.unpack_from("<I", pfx, 16)[0]
    body = decompress_prefix(pfx[24], bytes(pfx[25:have]))
    if not body:
        return None
    name = None
    if orig == 2013 and len(body) > 10 and body[4] == 0:
        name = cstring(body, 10)            # flags(4) kind(1) doclen(4) type(1)
    elif orig == 2004:
        ns = cstring(body, 4)
        if ns is not None:
            if not ns.endswith(b".$cmd"):
                return b"find"
            name = cstring(body, 4 + len(ns) + 1 + 13)
            if name == b"$query":
                name = cstring(body, 4 + len(ns) + 1 + 13 + 7 + 5)
    return name[:24] if name else None
