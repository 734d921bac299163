#!/usr/bin/env bash
# The whole suite again on Python interpreters other than the README's `python3`.
#
#   tools/other_pythons.sh [--newest] [PYTHON ...] [-- extra pytest arguments]
#
# agentrt supports Python 3.11 and later (pyproject.toml); the README's command tests the
# machine's `python3`. This runs the same test command with each interpreter named, or,
# with none named, each `python3.N` (N >= 12) found on PATH or in pyenv's versions;
# `--newest` keeps only the newest of those found (what .ci/run does). Each gets a venv of
# its own, `.venv-py3.N`, with the test extra installed; the first red run stops it.
# Finding none is said in one line and is not a failure: the README's run already tested
# the one Python the machine has (decision 0238).
set -euo pipefail
cd "$(dirname "$0")/.."

# As .ci/run runs the suite (tools/under_load.sh does the same): tests that would skip for a
# missing extra or browser fail, and the PostgreSQL half runs on the machine's server.
export CI="${CI:-true}"
export AGENTRT_TEST_POSTGRES_URL="${AGENTRT_TEST_POSTGRES_URL:-postgresql://root@127.0.0.1:5432/test}"

newest=false
pythons=()
while [[ $# -gt 0 && $1 != "--" ]]; do
    case $1 in
        --newest) newest=true ;;
        *) pythons+=("$1") ;;
    esac
    shift
done
[[ ${1:-} == "--" ]] && shift

if [[ ${#pythons[@]} -eq 0 ]]; then
    root="${PYENV_ROOT:-$HOME/.pyenv}"
    for minor in 12 13 14 15; do
        # A pyenv shim is on PATH for every version pyenv has, and fails for one that is not
        # selected: each candidate must run (and be that version) to count.
        for candidate in "$(command -v "python3.$minor" || true)" \
            $(ls -d "$root"/versions/3."$minor".*/bin/python3."$minor" 2>/dev/null | sort -rV); do
            if [[ -n $candidate ]] && [[ $("$candidate" -c 'import sys; print(sys.version_info[:2])' \
                2>/dev/null) == "(3, $minor)" ]]; then
                pythons+=("$candidate")
                break
            fi
        done
    done
    if [[ ${#pythons[@]} -eq 0 ]]; then
        echo "other Pythons: none found (python3.12 or later, on PATH or under pyenv)"
        exit 0
    fi
    if $newest; then
        pythons=("${pythons[-1]}")
    fi
fi

for python in "${pythons[@]}"; do
    if ! version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
    then
        echo "other Pythons: $python does not run (name an interpreter, e.g. python3.13)"
        exit 2
    fi
    venv=".venv-py$version"
    echo "other Pythons: the suite on $("$python" -VV | head -n 1) ($python), in $venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q -e '.[test]'
    start=$(date +%s)
    "$venv/bin/python" -m pytest -q -n auto --dist worksteal "$@"
    echo "other Pythons: $version green in $(($(date +%s) - start)) s"
done
