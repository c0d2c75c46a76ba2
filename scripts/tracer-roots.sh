#!/usr/bin/env bash
# tracer-roots.sh - build Debian roots holding newer bpftrace and bcc, for the version
# matrix (the tracers users run are newer than Debian 12's): trixie (Debian 13) and sid.
#
# USAGE: scripts/tracer-roots.sh [SUITE...]     (as root; default: trixie sid)
#
# Each root is $MONGOPROBE_TOOLS/root-SUITE (debootstrap minbase, then bpftrace,
# python3-bpfcc and python3-zstandard), built once: a root whose stamp file exists is
# left as it is. scripts/in-root.sh runs a tracer inside one. A root that cannot be
# built is said in one line and skipped: the matrix tests then skip with that reason.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
tools=${MONGOPROBE_TOOLS:-$HOME/.cache/mongoprobe}
mirror=${MONGOPROBE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
say() { printf 'tracer-roots: %s\n' "$*" >&2; }

# $tools/bin/bpftrace-SUITE and python3-bcc-SUITE: what MONGOPROBE_BPFTRACE and
# MONGOPROBE_BCC_PYTHON name to use a root's tracers (written anew each time).
wrappers() {
    local suite=$1 root=$tools/root-$1
    [ -f "$root/.mongoprobe-root" ] || return 0
    mkdir -p "$tools/bin"
    install -m 755 "$top/scripts/in-root.sh" "$tools/bin/in-root.sh"
    printf '#!/bin/sh\nexec "%s" "%s" bpftrace "$@"\n' "$tools/bin/in-root.sh" "$root" \
        >"$tools/bin/bpftrace-$suite"
    printf '#!/bin/sh\nexec "%s" "%s" python3 "$@"\n' "$tools/bin/in-root.sh" "$root" \
        >"$tools/bin/python3-bcc-$suite"
    chmod 755 "$tools/bin/bpftrace-$suite" "$tools/bin/python3-bcc-$suite"
}

build_root() {
    local suite=$1 root=$tools/root-$1
    [ -f "$root/.mongoprobe-root" ] && return 0
    command -v debootstrap >/dev/null || {
        say "apt-get install debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    }
    say "building the $suite root in $root (debootstrap, a few minutes)"
    rm -rf "$root.tmp"
    mkdir -p "$tools"
    if ! debootstrap --variant=minbase "$suite" "$root.tmp" "$mirror" >"$tools/root-$suite.log" 2>&1; then
        say "debootstrap $suite failed (log: $tools/root-$suite.log): its matrix tests skip"
        return 0
    fi
    # sid's (and forky's) Release files may be older than their Valid-Until on a mirror
    # snapshot: apt refuses them without this.
    echo 'Acquire::Check-Valid-Until "false";' >"$root.tmp/etc/apt/apt.conf.d/99mongoprobe"
    if ! chroot "$root.tmp" /usr/bin/env DEBIAN_FRONTEND=noninteractive sh -c \
        'apt-get update -qq && apt-get install -y -qq --no-install-recommends \
             bpftrace python3-bpfcc python3-zstandard libc6-dev' >>"$tools/root-$suite.log" 2>&1; then
        say "installing the tracers in the $suite root failed (log: $tools/root-$suite.log)"
        return 0
    fi
    chroot "$root.tmp" sh -c 'bpftrace --version; dpkg-query -W -f="bcc \${Version}\n" python3-bpfcc' \
        >"$root.tmp/.mongoprobe-root"
    rm -rf "$root"
    mv "$root.tmp" "$root"
    say "$suite root ready: $(tr '\n' ' ' <"$root/.mongoprobe-root")"
}

[ $# -gt 0 ] || set -- trixie sid
for s in "$@"; do build_root "$s"; wrappers "$s"; done
