#!/usr/bin/env bash
# The SQLite tests again on a SQLite library other than the machine's (decision 0239).
#
#   tools/newer_sqlite.sh [--stock] [--npm VERSION | AMALGAMATION] [-- pytest arguments]
#
# AMALGAMATION is a `sqlite3.c` (or the directory holding it). `--npm VERSION` takes the one
# in the npm package `better-sqlite3@VERSION` (`npm pack`, the only download this script
# makes, and only when asked). It is built as `libsqlite3.so.0` in a directory under
# ${TMPDIR:-/tmp} (never in the repository), with the compile options of Debian 12's
# library, so that only the version differs; `--stock` builds with SQLite's own defaults
# and SQLITE_DQS=0 instead (as Homebrew, python.org or better-sqlite3 builds differ). The
# venv's Python then loads it through LD_LIBRARY_PATH (Linux, a `_sqlite3` linked against
# `libsqlite3.so.0`); the script stops unless `sqlite3.sqlite_version` is the one built.
# With no pytest arguments it runs the store's tests (the files that touch SQLite), two
# workers. PYTHON names another interpreter than the venv's.
set -euo pipefail
cd "$(dirname "$0")/.."

stock=false
npm_version=""
source=""
while [[ $# -gt 0 && $1 != "--" ]]; do
    case $1 in
        --stock) stock=true ;;
        --npm) npm_version=$2; shift ;;
        *) source=$1 ;;
    esac
    shift
done
[[ ${1:-} == "--" ]] && shift
python="${PYTHON:-.venv/bin/python}"
[[ -x $python ]] || { echo "newer SQLite: no $python (make the venv as the README says, or set PYTHON)"; exit 2; }

work="${TMPDIR:-/tmp}/agentrt-newer-sqlite"
mkdir -p "$work"
if [[ -n $npm_version ]]; then
    (cd "$work" && rm -rf package && npm pack --silent "better-sqlite3@$npm_version" >/dev/null \
        && tar xzf "better-sqlite3-$npm_version.tgz" package/deps/sqlite3)
    source="$work/package/deps/sqlite3/sqlite3.c"
fi
[[ -d $source ]] && source="$source/sqlite3.c"
[[ -f $source ]] || { echo "newer SQLite: name a sqlite3.c, its directory, or --npm VERSION"; exit 2; }
version=$(sed -n 's/^#define SQLITE_VERSION  *"\(.*\)"$/\1/p' "$source" | head -n 1)
[[ -n $version ]] || { echo "newer SQLite: $source names no SQLITE_VERSION"; exit 2; }

if $stock; then
    flavour=stock
    options=(-DSQLITE_DQS=0 -DSQLITE_ENABLE_FTS5 -DSQLITE_ENABLE_RTREE -DSQLITE_ENABLE_COLUMN_METADATA
        -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_MATH_FUNCTIONS)
else
    flavour=debian
    # Debian 12's `PRAGMA compile_options` where they are not SQLite's defaults.
    options=(-DSQLITE_DEFAULT_RECURSIVE_TRIGGERS -DSQLITE_SECURE_DELETE -DSQLITE_OMIT_LOOKASIDE
        -DSQLITE_SOUNDEX -DSQLITE_TEMP_STORE=1 -DSQLITE_USE_URI -DSQLITE_MAX_VARIABLE_NUMBER=250000
        -DSQLITE_MAX_SCHEMA_RETRY=25 -DSQLITE_MAX_MMAP_SIZE=0x7fff0000 -DSQLITE_ENABLE_COLUMN_METADATA
        -DSQLITE_ENABLE_DBSTAT_VTAB -DSQLITE_ENABLE_FTS3 -DSQLITE_ENABLE_FTS3_PARENTHESIS
        -DSQLITE_ENABLE_FTS3_TOKENIZER -DSQLITE_ENABLE_FTS4 -DSQLITE_ENABLE_FTS5
        -DSQLITE_ENABLE_MATH_FUNCTIONS -DSQLITE_ENABLE_PREUPDATE_HOOK -DSQLITE_ENABLE_RTREE
        -DSQLITE_ENABLE_SESSION -DSQLITE_ENABLE_STMTVTAB -DSQLITE_ENABLE_UNLOCK_NOTIFY
        -DSQLITE_ENABLE_UPDATE_DELETE_LIMIT -DSQLITE_LIKE_DOESNT_MATCH_BLOBS
        -DSQLITE_MALLOC_SOFT_LIMIT=1024 -DHAVE_ISNAN)
fi
lib="$work/$version-$flavour"
if [[ ! -f $lib/libsqlite3.so.0 || $source -nt $lib/libsqlite3.so.0 ]]; then
    mkdir -p "$lib"
    echo "newer SQLite: building $version ($flavour options) in $lib"
    cc -O2 -fPIC -shared -DSQLITE_THREADSAFE=1 "${options[@]}" -o "$lib/libsqlite3.so.0.tmp" \
        "$source" -lpthread -ldl -lm
    mv "$lib/libsqlite3.so.0.tmp" "$lib/libsqlite3.so.0"
fi

export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
loaded=$("$python" -c 'import sqlite3; print(sqlite3.sqlite_version)')
if [[ $loaded != "$version" ]]; then
    echo "newer SQLite: this Python still loads SQLite $loaded, not $version (is its _sqlite3"
    echo "linked against libsqlite3.so.0? ldd says:)"
    ldd "$("$python" -c 'import _sqlite3; print(_sqlite3.__file__)')" | grep -i sqlite || true
    exit 1
fi

export CI="${CI:-true}"
export AGENTRT_TEST_POSTGRES_URL="${AGENTRT_TEST_POSTGRES_URL:-postgresql://root@127.0.0.1:5432/test}"
if [[ $# -eq 0 ]]; then
    set -- -n 2 tests/store_contract tests/test_store*.py tests/test_migration*.py \
        tests/test_read_only_database.py tests/test_writer_turns.py tests/test_chain*.py \
        tests/test_bad_bytes.py tests/test_schema_recheck.py tests/test_concurrency.py \
        tests/test_cli*.py tests/test_view.py $(grep -l sqlite3 tests/test_*.py)
fi
echo "newer SQLite: the tests on SQLite $version ($flavour options), $("$python" -V)"
exec "$python" -m pytest -q "$@"
