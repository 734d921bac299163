#!/usr/bin/env bash
# Run a command on a disk that syncs more slowly (issue 19, target 1).
#
#   tools/slow_disk.sh [--extra-us N] [--] COMMAND...
#   tools/slow_disk.sh --measure [--extra-us N]
#
# Builds tools/slow_fsync.c (gcc) into a temporary folder and runs COMMAND with it
# preloaded: every fsync/fdatasync of COMMAND and its children still syncs, then
# waits N more microseconds (default 100). `--measure` prints the median of 300
# fsynced SQLite commits (WAL, synchronous=FULL) with and without the wait, so N
# can be chosen for the commit time wanted (the issue's slow disk: 290-320 us).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
extra=100
measure=0
while [[ $# -gt 0 ]]; do
    case $1 in
        --extra-us) extra=$2; shift 2 ;;
        --measure) measure=1; shift ;;
        --) shift; break ;;
        *) break ;;
    esac
done
build="$(mktemp -d)"
trap 'rm -rf "$build"' EXIT
gcc -O2 -shared -fPIC -o "$build/slow_fsync.so" "$here/slow_fsync.c" -ldl
export SLOW_FSYNC_EXTRA_US="$extra"

commit_median() {
    python3 - "$build/commit.db" <<'PY'
import sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("PRAGMA journal_mode=WAL")
c.execute("PRAGMA synchronous=FULL")
c.execute("CREATE TABLE IF NOT EXISTS t (x)")
times = []
for i in range(300):
    t = time.perf_counter()
    c.execute("BEGIN IMMEDIATE")
    c.execute("INSERT INTO t VALUES (?)", (i,))
    c.execute("COMMIT")
    times.append(time.perf_counter() - t)
times.sort()
print(f"{times[150] * 1e6:.0f} us (p10 {times[30] * 1e6:.0f}, p90 {times[270] * 1e6:.0f})")
PY
}

if [[ $measure == 1 ]]; then
    echo "one fsynced commit, median of 300: this disk $(commit_median)"
    echo "one fsynced commit, median of 300: +${extra} us a sync $(LD_PRELOAD="$build/slow_fsync.so" commit_median)"
    exit 0
fi
[[ $# -gt 0 ]] || { echo "usage: tools/slow_disk.sh [--extra-us N] [--] COMMAND..." >&2; exit 2; }
echo "slow disk: every fsync waits ${extra} us more; load average $(cut -d' ' -f1-3 /proc/loadavg)"
LD_PRELOAD="$build/slow_fsync.so" "$@"
