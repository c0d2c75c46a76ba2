"""Sizes of the running kernel's structures, read from its BTF (/sys/kernel/btf/vmlinux).

A kernel build may change a structure's size (a config option adds a field): the map
memory model (``run.map_memory``) takes the sizes of the structures the kernel counts
in a map's memlock from here, so that its figures are the running kernel's, not one
build's. The format is the kernel's ``Documentation/bpf/btf.rst``: a header, then the
type section, each type a ``struct btf_type`` (name offset, info, size or type)
followed by data whose length its kind says, then the string section.
"""

from __future__ import annotations

import functools
import struct
from pathlib import Path

VMLINUX = Path("/sys/kernel/btf/vmlinux")
MAGIC = 0xEB9F
KIND_STRUCT = 4
# bytes after a btf_type, by kind: a fixed part, and a part per member (vlen)
_EXTRA = {1: (4, 0), 2: (0, 0), 3: (12, 0), 4: (0, 12), 5: (0, 12), 6: (0, 8),
          7: (0, 0), 8: (0, 0), 9: (0, 0), 10: (0, 0), 11: (0, 0), 12: (0, 0),
          13: (0, 8), 14: (4, 0), 15: (0, 12), 16: (0, 0), 17: (4, 0), 18: (0, 0),
          19: (0, 12)}


@functools.lru_cache(maxsize=4)
def struct_sizes(path: Path = VMLINUX) -> dict[str, int]:
    """{struct name: size in bytes} of every named struct of ``path``'s BTF; empty when
    the kernel has none (no CONFIG_DEBUG_INFO_BTF) or it cannot be read."""
    try:
        data = path.read_bytes()
    except OSError:
        return {}
    if len(data) < 24:
        return {}
    magic, _version, _flags, hdr_len = struct.unpack_from("<HBBI", data, 0)
    if magic != MAGIC:
        return {}
    type_off, type_len, str_off, _str_len = struct.unpack_from("<IIII", data, 8)
    types, strings = hdr_len + type_off, hdr_len + str_off
    out: dict[str, int] = {}
    pos, end = types, types + type_len
    while pos + 12 <= end:
        name_off, info, size = struct.unpack_from("<III", data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        fixed, per = _EXTRA.get(kind, (None, None))
        if fixed is None:
            return {}           # a kind this reader does not know: sizes unknown
        if kind == KIND_STRUCT and name_off:
            s = strings + name_off
            name = data[s:data.index(b"\0", s)].decode("ascii", "replace")
            out.setdefault(name, size)
        pos += 12 + fixed + per * vlen
    return out


def struct_size(name: str, default: int) -> int:
    """The running kernel's ``struct NAME`` size, else ``default``."""
    return struct_sizes().get(name, default)
