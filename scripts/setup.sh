#!/usr/bin/env bash
# setup.sh - install everything mongoprobe needs on a Debian 12 machine, idempotently.
#
# USAGE: scripts/setup.sh        (as root; safe to run again: each step checks first)
#
# Steps: Debian packages (tracers, perf, tshark, sysstat), tracefs, kernel headers
# for bcc, the project's virtualenv (.venv, pinned pip packages, sees Debian's bcc
# module), the embedded target (FerretDB built from the Go module proxy), and Debian 13
# and sid roots holding newer bpftrace and bcc (scripts/tracer-roots.sh).
# Tool versions are pinned here; each run records what it used in its manifest.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
tools=${MONGOPROBE_TOOLS:-$HOME/.cache/mongoprobe}
FERRETDB_VERSION=v1.24.0
HEADERS_SERIES=6.1.0            # Debian 12 kernel headers that compile bcc programs here

say() { printf 'setup: %s\n' "$*" >&2; }

# --- Debian packages -------------------------------------------------------
apt_pkgs=(bpftrace bpfcc-tools python3-bpfcc linux-perf tshark sysstat
          python3-venv python3-pip procps iproute2 curl chromium openssl
          python3-zstandard    # mongolatency.py (Debian python) names zstd-compressed requests
          postgresql)          # target start --backend postgresql (a private cluster)
missing=()
for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    say "apt-get install ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    # tshark asks whether non-root users may capture; answer once, non-interactively.
    echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- tracefs (bpftrace, bcc and perf need it) -------------------------------
if [ -z "$(ls -A /sys/kernel/tracing 2>/dev/null)" ]; then
    say "mounting tracefs on /sys/kernel/tracing"
    mount -t tracefs nodev /sys/kernel/tracing || say "could not mount tracefs (probes will not run)"
fi

# --- kernel headers for bcc (only when the running kernel has none) ---------
kmod=/lib/modules/$(uname -r)
if [ ! -e "$kmod/build/include" ] || [ ! -e "$kmod/source/include/linux/kconfig.h" ]; then
    hdr=$(ls -d /usr/src/linux-headers-${HEADERS_SERIES}-*-amd64 2>/dev/null | sort -V | tail -n 1 || true)
    if [ -z "$hdr" ]; then
        ver=$(apt-cache search --names-only "^linux-headers-${HEADERS_SERIES}-[0-9]+-amd64$" \
              | awk '{print $1}' | sort -V | tail -n 1)
        if [ -n "$ver" ]; then
            say "apt-get install $ver ${ver%-amd64}-common (bcc needs kernel headers)"
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$ver" "${ver%-amd64}-common" >/dev/null
            hdr=/usr/src/$ver
        fi
    fi
    if [ -n "$hdr" ] && [ -d "$hdr" ]; then
        mkdir -p "$kmod"
        # Debian splits headers: the arch part (build) and the common tree (source).
        ln -sfn "$hdr" "$kmod/build"
        ln -sfn "${hdr%-amd64}-common" "$kmod/source"
        say "linked $kmod/build -> $hdr, source -> ${hdr%-amd64}-common"
    else
        say "no kernel headers found: the bcc engine will not compile here"
    fi
fi

# --- Python: the project's virtualenv ----------------------------------------
# Debian's interpreter with --system-site-packages so `import bcc` (python3-bpfcc) works.
venv=$top/.venv
if [ ! -x "$venv/bin/python" ]; then
    say "creating $venv"
    /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
stamp=$venv/.mongoprobe-installed
want=$(cat "$top/setup.py" "$top/setup.cfg" "$top/pyproject.toml" | sha256sum | cut -c1-16)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    say "pip install -e .[test]"
    "$venv/bin/pip" install -q --disable-pip-version-check -e "$top[test]"
    echo "$want" > "$stamp"
fi

# --- inferno: folded stacks -> SVG flame graphs (crates.io, pinned) ----------
# mongoprobe.views.flamegraph runs $tools/inferno-VERSION/bin/inferno-*; a FlameGraph
# checkout named by FLAMEGRAPH_DIR (flamegraph.pl) is used instead when set.
INFERNO_VERSION=0.12.8          # keep equal to mongoprobe.views.flamegraph.INFERNO_VERSION
if [ ! -x "$tools/inferno-$INFERNO_VERSION/bin/inferno-flamegraph" ]; then
    cargo=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
    if [ -x "$cargo" ]; then
        say "cargo install inferno $INFERNO_VERSION (a few minutes)"
        "$cargo" install inferno --version "$INFERNO_VERSION" --locked --quiet \
            --root "$tools/inferno-$INFERNO_VERSION"
    else
        say "no cargo: inferno not installed (flame graphs need it or FLAMEGRAPH_DIR)"
    fi
fi

# --- the embedded target: FerretDB from the Go module proxy ------------------
fbin=$tools/ferretdb-$FERRETDB_VERSION/ferretdb
if [ ! -x "$fbin" ]; then
    say "building FerretDB $FERRETDB_VERSION (about a minute)"
    mod=github.com/FerretDB/FerretDB@$FERRETDB_VERSION
    dl=$(mktemp -d)
    # `go install …@version` is refused by the proxy here; `go mod download` works.
    dir=$(cd "$dl" && go mod download -json "$mod" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -d "$dir" ] || { say "go mod download $mod failed"; exit 1; }
    src=$tools/ferretdb-$FERRETDB_VERSION/src
    rm -rf "$src"; mkdir -p "$src"
    cp -r "$dir"/. "$src"/
    chmod -R u+w "$src"
    # The module download lacks version.txt; the binary panics at start without it.
    echo "$FERRETDB_VERSION" > "$src/build/version/version.txt"
    (cd "$src" && go build -buildvcs=false -o "$fbin.tmp" ./cmd/ferretdb)
    mv "$fbin.tmp" "$fbin"
    rm -rf "$dl"
fi

# --- a Node.js client: the MongoDB Node.js driver from npm ------------------------
# tests/nodeclient/load.js runs on it under record (the driver's moreToCome
# endSessions). Pinned by tests/nodeclient/package-lock.json, installed with `npm ci`
# into a folder named by the lock file's hash (tests/helpers/nodeclient.py computes it).
command -v npm >/dev/null || {
    say "apt-get install nodejs npm"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
}
nhash=$(cat "$top/tests/nodeclient/package.json" "$top/tests/nodeclient/package-lock.json" \
        | sha256sum | cut -c1-16)
ndir=$tools/nodeclient-$nhash
if [ ! -d "$ndir/node_modules/mongodb" ]; then
    say "npm ci (the MongoDB Node.js driver) into $ndir"
    rm -rf "$ndir.tmp"; mkdir -p "$ndir.tmp"
    cp "$top/tests/nodeclient/package.json" "$top/tests/nodeclient/package-lock.json" "$ndir.tmp/"
    (cd "$ndir.tmp" && npm ci --silent --no-audit --no-fund >/dev/null)
    rm -rf "$ndir"; mv "$ndir.tmp" "$ndir"
fi

# --- DTrace: Oracle's dtrace-utils built from the project's shared folder -----
# Only where the shared folder carries the kit (../shared/dtrace-linux beside the
# repository, or $MONGOPROBE_SHARED/dtrace-linux). Pinned to the tarball's commit;
# built into $tools/dtrace-COMMIT/ when missing (about 20 s, offline). The D tools
# (dtrace/*.d, --engine dtrace) find it there; dtrace needs debugfs mounted.
DTRACE_COMMIT=8a1264bf          # keep equal to mongoprobe.run.tracer.DTRACE_COMMIT
dtrace_kit=${MONGOPROBE_SHARED:-$top/../shared}/dtrace-linux
if [ -f "$dtrace_kit/build.sh" ] && [ -f "$dtrace_kit/dtrace-utils-devel-$DTRACE_COMMIT.tar.gz" ]; then
    if [ ! -x "$tools/dtrace-$DTRACE_COMMIT/dtrace" ]; then
        dtrace_pkgs=(gcc-bpf binutils-bpf binutils-dev libpcap-dev libfuse3-dev libbpf-dev
                     libelf-dev zlib1g-dev libpfm4-dev bison flex libc6-dev-i386 valgrind
                     libsystemd-dev pkg-config make gcc)
        dmissing=()
        for p in "${dtrace_pkgs[@]}"; do
            dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || dmissing+=("$p")
        done
        if ((${#dmissing[@]})); then
            say "apt-get install ${dmissing[*]} (DTrace build)"
            apt-get update -qq
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${dmissing[@]}" >/dev/null
        fi
        say "building DTrace ($DTRACE_COMMIT) from $dtrace_kit (about 20 s)"
        # build.sh writes its wrapper (the dtrace this checks for) last
        rm -rf "$tools/dtrace-$DTRACE_COMMIT"
        bash "$dtrace_kit/build.sh" "$tools/dtrace-$DTRACE_COMMIT" >/dev/null ||
            say "DTrace build failed (log: $tools/dtrace-$DTRACE_COMMIT/build.log): D tests will skip"
    fi
    if [ -x "$tools/dtrace-$DTRACE_COMMIT/dtrace" ] && [ -z "$(ls -A /sys/kernel/debug 2>/dev/null)" ]; then
        say "mounting debugfs on /sys/kernel/debug (DTrace needs it)"
        mount -t debugfs none /sys/kernel/debug || say "could not mount debugfs (DTrace will not run)"
    fi
else
    say "no DTrace kit at $dtrace_kit: the D tools are not built here (their tests skip)"
fi

# --- bench/probe_cost.py: bpftool and the Java fast target --------------------
# bpftool reads the kernel's per-program run time (bpf_stats). bench/java is built
# by Maven (versions pinned in its pom.xml: mongo-java-server 1.47.0 with its memory
# backend, the MongoDB Java driver 4.11.1) into one jar, named by the hash of the
# pom and sources (bench/probe_cost.py computes the same) and built only when absent.
jpkgs=()
[ -x /usr/sbin/bpftool ] || command -v bpftool >/dev/null || jpkgs+=(bpftool)
command -v javac >/dev/null || jpkgs+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || jpkgs+=(maven)
if ((${#jpkgs[@]})); then
    say "apt-get install ${jpkgs[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${jpkgs[@]}" >/dev/null
fi
jhash=$(cd "$top" && find bench/java -type f \( -name pom.xml -o -name '*.java' \) \
        | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-16)
jdir=$tools/bench-java-$jhash
if [ ! -f "$jdir/mongoprobe-bench.jar" ]; then
    say "building bench/java with Maven into $jdir"
    jbuild=$(mktemp -d)
    cp -r "$top/bench/java/." "$jbuild/"
    (cd "$jbuild" && mvn -q -B package)
    mkdir -p "$jdir"
    cp "$jbuild/target/mongoprobe-bench.jar" "$jdir/mongoprobe-bench.jar.tmp"
    mv "$jdir/mongoprobe-bench.jar.tmp" "$jdir/mongoprobe-bench.jar"
    rm -rf "$jbuild"
fi

# --- the tracer version matrix: Debian 13 and sid roots with newer bpftrace and bcc --
# Built once into $tools/root-SUITE (a few minutes each, ~0.8 GB); the version-matrix
# tests run their tracers through the wrappers in $tools/bin. MONGOPROBE_TRACER_ROOTS=""
# skips them (those tests then skip, saying so).
roots=${MONGOPROBE_TRACER_ROOTS-trixie sid}
[ -z "$roots" ] || bash "$top/scripts/tracer-roots.sh" $roots

say "ready (tools in $tools)"
