#!/usr/bin/env bash
# in-root.sh - run a tracer inside a Debian root built by scripts/tracer-roots.sh, as if
# it were installed here: the same pids, kernel and files.
#
# USAGE: scripts/in-root.sh ROOT COMMAND [ARGS...]
#        e.g. scripts/in-root.sh ~/.cache/mongoprobe/root-sid bpftrace --version
#
# The command runs in a private mount namespace (unshare -m: nothing is left mounted
# when it exits) with /proc, /sys (tracefs and debugfs inside), /dev, /lib/modules and
# /usr/src bound into the root, and at the same paths: the current folder, /tmp, the
# folder of every argument that is an existing absolute path, and each folder of
# $MONGOPROBE_ROOT_BINDS (colon-separated). unshare and chroot exec, so the tracer keeps
# this script's pid: SIGINT and SIGTERM reach it as they would a tracer run directly.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: in-root.sh ROOT COMMAND [ARGS...]" >&2; exit 2; }
root=$(cd "$1" && pwd); shift
[ -x "$root/bin/sh" ] || { echo "in-root.sh: $root is not a root (no bin/sh)" >&2; exit 2; }

binds=("$PWD" /tmp)
for a in "$@"; do
    case $a in /*) [ -e "$a" ] && binds+=("$(dirname "$a")") ;; esac
done
IFS=: read -r -a extra <<<"${MONGOPROBE_ROOT_BINDS:-}"
binds+=("${extra[@]}")

# The inner shell gets the root and the bind list as its arguments, then the command.
exec unshare -m --propagation private /bin/sh -c '
    set -e
    root=$1; n=$2; shift 2
    for d in /proc /sys /dev /lib/modules /usr/src; do
        [ -e "$d" ] || continue
        mkdir -p "$root$d"
        mount --rbind "$d" "$root$d"
    done
    while [ "$n" -gt 0 ]; do
        d=$1; shift; n=$((n - 1))
        case $d in ""|/) continue ;; esac
        [ -d "$d" ] || continue
        # a folder the root has as its own (/usr/..., /etc) is never covered
        case $d in /usr|/usr/*|/etc|/etc/*|/bin|/bin/*|/lib|/lib/*|/sbin|/sbin/*|/var/lib|/var/lib/*) continue ;; esac
        mkdir -p "$root$d"
        mount --rbind "$d" "$root$d"
    done
    here=$PWD
    exec chroot "$root" /bin/sh -c "cd \"\$0\" 2>/dev/null || cd /; exec \"\$@\"" "$here" "$@"
' in-root "$root" "${#binds[@]}" "${binds[@]}" "$@"
