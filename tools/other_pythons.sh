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

# A `python3.N` found counts only if it runs: pyenv's shim for a version that is installed
# but not selected is on PATH and says "command not found" (exit 127).
runs() { [[ -n $1 ]] && "$1" -c 'import sys' >/dev/null 2>&1; }

if [[ ${#pythons[@]} -eq 0 ]]; then
    for minor in 12 13 14 15; do
        found=$(command -v "python3.$minor" || true)
        if ! runs "$found"; then
            root="${PYENV_ROOT:-$HOME/.pyenv}"
            found=$(ls -d "$root"/versions/3."$minor".*/bin/python3."$minor" 2>/dev/null |
                sort -V | tail -n 1 || true)
        fi
        if runs "$found"; then
            pythons+=("$found")
        fi
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
    version=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    venv=".venv-py$version"
    echo "other Pythons: the suite on $("$python" -VV | head -n 1) ($python), in $venv"
    "$python" -m venv "$venv"
    "$venv/bin/pip" install -q -e '.[test]'
    start=$(date +%s)
    "$venv/bin/python" -m pytest -q -n auto --dist worksteal "$@"
    echo "other Pythons: $version green in $(($(date +%s) - start)) s"
done
