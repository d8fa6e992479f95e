#!/usr/bin/env bash
# First run, timed (issue 15): a fresh clone -> `make dev` answering on its API, and the
# start time of CLI commands that need no database. Run from the repository root:
#
#     bash bench/first_run.sh [--cold]
#
# The clone goes to a temporary directory; `make dev` uses the embedded PostgreSQL (no
# DATABASE_URL) on a free port. `--cold` empties uv's cache first (a machine that never
# installed these packages; downloads from PyPI). Figures are printed, never asserted.
# Issue 15's targets: API answering within 30 s of `make dev` on a quiet machine;
# `reminders --help` and commands that need no database <= 0.3 s.
set -euo pipefail
repo=$(pwd)
work=$(mktemp -d)
trap 'pkill -TERM -f "reminders dev --port ${port:-0}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT
if [[ "${1:-}" == "--cold" ]]; then
  uv_cache=$(mktemp -d)
  export UV_CACHE_DIR=$uv_cache
  echo "cold: empty uv cache at $uv_cache"
fi
git clone -q "$repo" "$work/clone"
cd "$work/clone"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
unset DATABASE_URL STATE_DIR JWT_SECRET PROMETHEUS_MULTIPROC_DIR
start=$(date +%s.%N)
make dev ARGS="--port $port" > "$work/dev.log" 2>&1 &
dev_pid=$!
installed=""
until curl -fsS "http://127.0.0.1:$port/healthz" > /dev/null 2>&1; do
  if [[ -z "$installed" && -f .venv/.installed ]]; then
    installed=$(date +%s.%N)
  fi
  if ! kill -0 "$dev_pid" 2>/dev/null; then
    echo "make dev exited:"; tail -30 "$work/dev.log"; exit 1
  fi
  sleep 0.1
done
ready=$(date +%s.%N)
installed=${installed:-$ready}
printf '%-44s %6.1f s\n' "make dev: install (uv)" "$(echo "$installed - $start" | bc)"
printf '%-44s %6.1f s\n' "make dev: install to API answering /healthz" "$(echo "$ready - $installed" | bc)"
printf '%-44s %6.1f s   (target <= 30 s)\n' "make dev: fresh clone to API answering" "$(echo "$ready - $start" | bc)"
# A background job ignores SIGINT in a non-interactive shell: stop `reminders dev` itself.
pkill -TERM -f "reminders dev --port $port" || true
wait "$dev_pid" 2>/dev/null || true; dev_pid=0
for cmd in "--help" "api --help" "dev --help" "token --help" "dlq --help" "status --help" "migrate --help"; do
  best=""
  for _ in 1 2 3; do
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    .venv/bin/reminders $cmd > /dev/null
    t=$(echo "$(date +%s.%N) - $t0" | bc)
    if [[ -z "$best" ]] || (( $(echo "$t < $best" | bc) )); then best=$t; fi
  done
  printf '%-44s %6.2f s   (best of 3; target <= 0.3 s)\n' "reminders $cmd" "$best"
done
