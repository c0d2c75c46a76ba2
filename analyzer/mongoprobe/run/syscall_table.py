"""This machine's syscall table: {number: name} for the tools that count syscalls by
number (syscount.bt keys raw_syscalls by id).

From ``ausyscall --dump`` when installed (auditd), else from ``asm/unistd_64.h`` in
the kernel headers; without either it is empty (the numbers are shown as ``sys_N``).
"""

from __future__ import annotations

import functools
import os
import platform
import re
import shutil
import subprocess

UNISTD_HEADERS = {
    "x86_64": ["/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"],
    "aarch64": ["/usr/include/asm-generic/unistd.h"],
}
_DEFINE = re.compile(r"^#define\s+__NR_(\w+)\s+(\d+)\s*$")


@functools.lru_cache(maxsize=1)
def names() -> dict[int, str]:
    """{number: name} for this machine's architecture (see the module docstring)."""
    if shutil.which("ausyscall"):
        try:
            r = subprocess.run(["ausyscall", "--dump"], capture_output=True, text=True,
                               timeout=10)
            table = {}
            for line in r.stdout.splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[0].isdigit():
                    table[int(parts[0])] = parts[1]
            if table:
                return table
        except (OSError, subprocess.TimeoutExpired):
            pass
    for path in UNISTD_HEADERS.get(platform.machine(), []):
        if os.path.exists(path):
            table = {}
            with open(path) as fh:
                for line in fh:
                    m = _DEFINE.match(line)
                    if m:
                        table[int(m[2])] = m[1]
            if table:
                return table
    return {}


def source() -> str:
    """Where :func:`names` got its table (for the tools to say)."""
    if shutil.which("ausyscall"):
        return "ausyscall --dump"
    for path in UNISTD_HEADERS.get(platform.machine(), []):
        if os.path.exists(path):
            return path
    return "no syscall table (install auditd or linux-libc-dev)"
