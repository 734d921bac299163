#!/usr/bin/env bash
# Everything a release needs, in order, stopping at the first failure:
#
#   tools/release_check.sh
#
#   1. a fresh virtualenv (.venv-release) with the package and its test extra
#   2. the whole test suite (the README's test command)
#   3. python -m build: the sdist and the wheel, into dist/
#   4. twine check --strict on both
#   5. the built wheel in a fresh virtualenv (tests/test_release.py)
#   6. the documentation site, mkdocs build --strict, into site/
#
# Run it from a fresh clone. Nothing is uploaded: publishing stays a separate,
# deliberate step (see CONTRIBUTING.md, "Releasing").
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${RELEASE_VENV:-.venv-release}
step() { printf '\n== release check: %s\n' "$*"; }
trap 'printf "\n== release check FAILED at: %s\n" "${CURRENT:-setup}" >&2' ERR

CURRENT="virtualenv"; step "$CURRENT ($VENV)"
python3 -m venv "$VENV"
"$VENV/bin/pip" install -q -e '.[test]'

CURRENT="tests"; step "$CURRENT"
# The PostgreSQL half of the suite runs on the machine's server, as in .ci/run (docs/postgres.md).
export AGENTRT_TEST_POSTGRES_URL="${AGENTRT_TEST_POSTGRES_URL:-postgresql://root@127.0.0.1:5432/test}"
# RELEASE_PYTEST_ARGS narrows the suite while trying the script out; a release runs it all.
# shellcheck disable=SC2086
CI="${CI:-true}" "$VENV/bin/python" -m pytest -q -n auto --dist worksteal ${RELEASE_PYTEST_ARGS:-}

CURRENT="build"; step "$CURRENT"
rm -rf dist
"$VENV/bin/python" -m build --no-isolation --outdir dist .
ls -l dist

CURRENT="twine check"; step "$CURRENT"
"$VENV/bin/python" -m twine check --strict dist/*

CURRENT="wheel test"; step "$CURRENT"
CI="${CI:-true}" "$VENV/bin/python" -m pytest -q tests/test_release.py

CURRENT="docs"; step "$CURRENT"
NO_MKDOCS_2_WARNING=1 "$VENV/bin/mkdocs" build --strict --site-dir site

VERSION=$("$VENV/bin/python" -c 'import agentrt; print(agentrt.__version__)')
trap - ERR
printf '\n== release check passed: agentrt %s (dist/, site/)\n' "$VERSION"
