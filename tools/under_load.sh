#!/usr/bin/env bash
# The whole suite, three times in a row, beside two CPU-bound processes (issue 19).
#
#   tools/under_load.sh [RUNS] [-- extra pytest arguments]
#
# Runs the README's test command (the venv must exist: `.ci/run` or the README's
# first two steps make it) RUNS times (default 3) while two busy loops keep two
# cores' worth of work beside it, and stops at the first red run. Prints each
# run's time and the load average. Tests that judge leases, timeouts or races
# must pass here: they synchronise on events and injected clocks, not on how
# fast the machine is (docs/decisions/0062-a-fast-suite-that-load-cannot-break.md).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=3
if [[ $# -gt 0 && $1 != "--" ]]; then
    runs=$1
    shift
fi
[[ ${1:-} == "--" ]] && shift

export CI="${CI:-true}"
# The PostgreSQL half runs as in .ci/run (with CI set, its tests fail rather than skip).
export AGENTRT_TEST_POSTGRES_URL="${AGENTRT_TEST_POSTGRES_URL:-postgresql://root@127.0.0.1:5432/test}"
burners=()
stop_burners() {
    for pid in "${burners[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
}
trap stop_burners EXIT

for _ in 1 2; do
    python3 -c 'while True: pass' &
    burners+=("$!")
done
echo "under load: two CPU-bound processes (${burners[*]}) on $(nproc) cores"

for run in $(seq 1 "$runs"); do
    start=$(date +%s)
    echo "== run $run of $runs, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    if ! .venv/bin/python -m pytest -q -n auto --dist worksteal "$@"; then
        echo "== run $run of $runs: RED after $(($(date +%s) - start)) s"
        exit 1
    fi
    echo "== run $run of $runs: green in $(($(date +%s) - start)) s, load average: $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "== green $runs time(s) in a row under load"
