# tlshooks  Find the TLS library a server process uses, and where to hook it.
#           For Linux; used by mongolatency.py and mongosnoop.py (bcc) and by
#           mongoprobe for mongo_latency.bt (bpftrace). No BPF here.
#
# A target's TLS plaintext is read through uprobes (probes/mongo_tls.h):
# - OpenSSL: SSL_read, SSL_write, SSL_read_ex, SSL_write_ex, in a libssl the
#   process has mapped (/proc/PID/maps), or linked statically into its
#   executable (the symbols in its ELF symbol tables); and SSL_free there
#   (Hook.free), where the state of a connection on memory BIOs (keyed by its
#   SSL *: asio's ssl::stream, mongod) is forgotten - without it such
#   connections are not decoded;
# - Go crypto/tls: crypto/tls.(*Conn).Read and Write in the executable, with the
#   offsets of their RET instructions (objdump --disassemble=SYMBOL): Go
#   returns are probed there, not with uretprobes, which corrupt goroutine
#   stacks that move.
#
# find(pid) returns what it found; a process with neither gets [].
#
# Copyright 2025 mongoprobe authors.
# Licensed under the Apache License, Version 2.0 (the "License")
#
# 2025          mongoprobe      Created this.

from __future__ import print_function

import os
import re
import shutil
import struct
import subprocess

OPENSSL_FUNCS = ("SSL_read", "SSL_write", "SSL_read_ex", "SSL_write_ex")
SSL_FREE = "SSL_free"           # memory-BIO connections' state is freed there
GO_READ = "crypto/tls.(*Conn).Read"
GO_WRITE = "crypto/tls.(*Conn).Write"


class TlsError(Exception):
    """A TLS library was found but cannot be hooked: the message says why."""


class Hook(object):
    """One library to hook: kind "openssl" or "go", the ELF file's path (the
    process's own file: under /proc/PID/root, or a /proc/PID/map_files link or
    /proc/PID/exe when the file at its path is no longer the one mapped), the
    functions found in it and, for Go, {function: [offsets of its RET instructions]}; for OpenSSL, free: whether
    SSL_free is there (without it, memory-BIO connections are not decoded: their
    state, keyed by SSL *, would never be freed)."""

    def __init__(self, kind, path, funcs, rets=None, shown=None, free=False):
        self.kind, self.path, self.funcs = kind, path, list(funcs)
        self.rets = rets or {}
        self.shown = shown or path      # the path as the process maps it
        self.free = free

    def describe(self):
        if self.kind == "go":
            return "Go crypto/tls (*Conn).Read/Write in %s (uprobes at entry and at " \
                "%d RET instructions)" % (self.shown, sum(len(v) for v in self.rets.values()))
        return "OpenSSL %s in %s (uprobes, uretprobes%s)" % (
            "/".join(self.funcs), self.shown, "; SSL_free" if self.free else "")


def elf_symbols(path, wanted):
    """{name: (value, size)} of the names in wanted defined (non-zero value) in
    the ELF file's .symtab or .dynsym."""
    with open(path, "rb") as f:
        data = f.read(64)
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return {}               # not a 64-bit little-endian ELF file
        shoff, = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum = struct.unpack_from("<HH", data, 0x3a)
        f.seek(shoff)
        sh = f.read(shentsize * shnum)
        secs = [struct.unpack_from("<IIQQQQIIQQ", sh, i * shentsize) for i in range(shnum)]
        want = set(w.encode() for w in wanted)
        out = {}
        for name, typ, _fl, _addr, off, size, link, _info, _al, entsize in secs:
            if typ not in (2, 11) or not entsize or link >= len(secs):
                continue            # SHT_SYMTAB, SHT_DYNSYM
            f.seek(off)
            syms = f.read(size)
            s = secs[link]
            f.seek(s[4])
            strtab = f.read(s[5])
            for st_name, _i, _o, _sh, value, ssize in struct.iter_unpack("<IBBHQQ", syms):
                if not value:
                    continue
                end = strtab.find(b"\0", st_name)
                n = strtab[st_name:end]
                if n in want:
                    out[n.decode()] = (value, ssize)
        return out


RET = re.compile(r"^\s*([0-9a-f]+):\s+ret\b", re.M)


def ret_offsets(path, func, value):
    """Offsets from func's start of its RET instructions (objdump)."""
    objdump = shutil.which("objdump")
    if objdump is None:
        raise TlsError("objdump (Debian binutils) is needed to find the RET "
                       "instructions of %s" % func)
    r = subprocess.run([objdump, "-d", "--no-show-raw-insn", "--disassemble=" + func, path],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       universal_newlines=True, timeout=120)
    if r.returncode != 0:
        raise TlsError("objdump %s: %s" % (path, r.stderr.strip()))
    offs = sorted(int(a, 16) - value for a in RET.findall(r.stdout))
    if not offs:
        raise TlsError("no RET instruction found in %s of %s" % (func, path))
    return offs


def _target_file(pid, path, dev_ino, mapping=None):
    """A path to the very file process pid runs (dev_ino: its st_dev, st_ino),
    whatever root the tracer runs in (a chroot with its own libraries at the
    same paths: a uprobe there would go to the root's copy): path under
    /proc/PID/root when that is still the file, else (replaced or deleted since
    it was mapped: a package upgrade) the mapping's /proc/PID/map_files link,
    or mapping itself (/proc/PID/exe)."""
    p = "/proc/%d/root%s" % (pid, path)
    try:
        st = os.stat(p)
        if (st.st_dev, st.st_ino) == dev_ino:
            return p
    except OSError:
        pass
    return mapping


def _dev_ino(maps_dev, inode):
    """(st_dev, st_ino) of a /proc/PID/maps line's "MAJOR:MINOR" and inode"""
    major, minor = (int(x, 16) for x in maps_dev.split(":"))
    return os.makedev(major, minor), int(inode)


def mapped_files(pid):
    """The files the process has mapped executable, in map order: [(path as
    the process maps it, the file to open for it: _target_file)]."""
    out, seen = [], set()
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            if len(parts) == 6 and "x" in parts[1] and parts[5].startswith("/"):
                p = parts[5].strip()
                if p.endswith(" (deleted)"):
                    p = p[:-len(" (deleted)")]
                if p in seen:
                    continue
                seen.add(p)
                mapping = "/proc/%d/map_files/%s" % (pid, parts[0])
                out.append((p, _target_file(pid, p, _dev_ino(parts[3], parts[4]), mapping)))
    return out


def find(pid):
    """The TLS libraries of process pid that can be hooked: [Hook]."""
    hooks = []
    exe = "/proc/%d/exe" % pid
    exe_link = os.readlink(exe)
    if exe_link.endswith(" (deleted)"):
        exe_link = exe_link[:-len(" (deleted)")]
    st = os.stat(exe)
    exe_file = _target_file(pid, exe_link, (st.st_dev, st.st_ino), exe)
    syms = elf_symbols(exe, OPENSSL_FUNCS + (SSL_FREE, GO_READ, GO_WRITE))
    if GO_READ in syms and GO_WRITE in syms:
        rets = dict((fn, ret_offsets(exe, fn, syms[fn][0])) for fn in (GO_READ, GO_WRITE))
        hooks.append(Hook("go", exe_file, (GO_READ, GO_WRITE), rets, exe_link))
    static = [fn for fn in OPENSSL_FUNCS if fn in syms]
    if "SSL_read" in static and "SSL_write" in static:
        hooks.append(Hook("openssl", exe_file, static, shown=exe_link,
                          free=SSL_FREE in syms))
    for path, real in mapped_files(pid):
        if not os.path.basename(path).startswith("libssl.so"):
            continue
        found = elf_symbols(real, OPENSSL_FUNCS + (SSL_FREE,))
        funcs = [fn for fn in OPENSSL_FUNCS if fn in found]
        if "SSL_read" in funcs and "SSL_write" in funcs:
            hooks.append(Hook("openssl", real, funcs, shown=path, free=SSL_FREE in found))
    return hooks


if __name__ == "__main__":      # manual check: tlshooks.py PID
    import sys
    for h in find(int(sys.argv[1])):
        print(h.describe(), h.rets if h.rets else "")
