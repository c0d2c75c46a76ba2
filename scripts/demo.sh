#!/usr/bin/env bash
# demo.sh - active benchmarking in one go on the embedded target: record a short
# multi-phase insert/query load with the latency (every request), profile, off-CPU and
# flush probes and vmstat/iostat, then print each phase's verdict (what limits it) and
# table, and write the HTML report.
# USAGE: scripts/demo.sh [RUN_DIR]    (default: runs/demo-DATE)
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
mp=.venv/bin/mongoprobe
run=${1:-runs/demo-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$(dirname "$run")"

# offcpu and --events: the evidence each phase's verdict (what limits it) needs
$mp record --target embedded -o "$run" --events \
    --probes latency,profile,offcpu,flush,vmstat,iostat,pidstat \
    -- "$top/.venv/bin/mongoprobe" load --phases 4i.1q:8s,1i@100.4q:8s,0i.4q:8s,4i.0q:8s
echo
$mp phases "$run"
echo
$mp report "$run" -o "$run/report.html" --diff 4i.1q 4i.0q
