#!/usr/bin/env bash
# demo.sh - the embedded target under a short mixed load, with the live
# server-side latency histogram per command.
# USAGE: scripts/demo.sh [SECONDS]
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
"$top/scripts/setup.sh"
cd "$top"
mp=.venv/bin/mongoprobe
secs=${1:-20}
$mp target start
info=$($mp target status --json)
pid=$(.venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])["pid"])' "$info")
uri=$(.venv/bin/python -c 'import json,sys; print(json.loads(sys.argv[1])["uri"])' "$info")
trap '$mp target stop >/dev/null' EXIT

# The probe prints every 5 s and at the end; the load starts once it is attached.
fifo=$(mktemp -u); mkfifo "$fifo"
$mp latency -p "$pid" -i 5 -d "$secs" --unit us 2> "$fifo" &
probe=$!
while read -r line; do
    echo "$line" >&2
    case $line in Tracing*) break ;; esac
done < "$fifo"
cat "$fifo" >&2 &
.venv/bin/python -m mongoprobe.mixedload --uri "$uri" --threads 8 --rounds 20 >&2
wait "$probe"
rm -f "$fifo"
