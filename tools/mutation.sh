#!/usr/bin/env bash
# Mutation campaign over the modules that hold the safety contracts.
#
#   tools/mutation.sh [MODULE ...]    MODULE: approval lease resume chain accounting canonical
#
# With no MODULE, all six run, one after the other. Each run starts from a fresh
# mutants/ copy of src/ and tests/, runs under `nice -n 19` with two workers, and
# uses the [tool.mutmut] test selection in pyproject.toml (slow tests excluded).
# For the takeover (_takeover.py, resume.py before issue 10), accounting and canonical only the functions that carry
# the contract are mutated (SCOPE below; MUTATION_WHOLE=1 mutates every
# function). Needs the `mutation` extra:
#   .venv/bin/pip install -e '.[test,mutation]'
# Results: a summary per module on stdout, and the diff of every mutant that was
# not killed in mutation-report/MODULE.diff (mutants/ is rebuilt on every call).
set -euo pipefail
set -f  # the mutant name patterns below are for mutmut, not for the shell
cd "$(dirname "$0")/.."

MUTMUT=${MUTMUT:-.venv/bin/mutmut}
PYTHON=${PYTHON:-.venv/bin/python}
CHILDREN=${MUTATION_CHILDREN:-2}

declare -A SCOPE=(
  [approval]="agentrt._approval.*"
  # The lease is taken by the named write take_lease (the compare-and-set; epoch = fencing token).
  [lease]="agentrt._lease.* agentrt._store.sqlite._writes.xǁSqliteTxǁtake_lease__*"
  [chain]="agentrt._chain.*"
  # Reserve and charge: the projection, the limit check, the dispatch record,
  # the settlement and the late-reply charge.
  [accounting]="agentrt._accounting.x_project__* agentrt._accounting.x_projection_usage__*
                agentrt._accounting.xǁAccountingCallerǁ_check_limits__*
                agentrt._accounting.xǁAccountingCallerǁ_dispatch__*
                agentrt._accounting.xǁAccountingCallerǁ_settle__*
                agentrt._store.sqlite._writes.xǁSqliteTxǁcharge_beyond_estimate__*
                agentrt._store.sqlite._writes.xǁSqliteTxǁdispatch_model_call__*
                agentrt._store.sqlite._writes.xǁSqliteTxǁsettle_model_call__*"
  # The takeover and the interruption contract's decision table (resume.py until
  # the reshaping of issue 10 split it; the takeover is _takeover.py now).
  [resume]="agentrt._takeover.* agentrt._store.sqlite._writes.xǁSqliteTxǁtake_over__*"
  # The encoder the approval hash depends on; the parser is not mutated.
  [canonical]="agentrt._canonical.x_canonical_json__* agentrt._canonical.x_policy_json__*
               agentrt._canonical.x_content_hash__* agentrt._canonical.x_to_text__*
               agentrt._canonical.x__encode__* agentrt._canonical.x__text_fast__*
               agentrt._canonical.x__plain__* agentrt._canonical.x__encode_slow__*
               agentrt._canonical.x__write__* agentrt._canonical.x__first__*
               agentrt._canonical.x__finish__* agentrt._canonical.x__int_to_decimal__*"
)
if [ "${MUTATION_WHOLE:-0}" = 1 ]; then
  # Every function of every module (hours on a shared two-core machine).
  for m in "${!SCOPE[@]}"; do SCOPE[$m]="agentrt._${m/resume/takeover}.*"; done
fi

modules=("$@")
if [ ${#modules[@]} -eq 0 ]; then
  modules=(approval lease resume chain accounting canonical)
fi
for m in "${modules[@]}"; do
  if [ -z "${SCOPE[$m]+x}" ]; then
    echo "unknown module: $m (one of: ${!SCOPE[*]})" >&2
    exit 2
  fi
done

# pytest escapes a test id that is not printable ASCII or that holds a backslash,
# and escapes it once more when one process collects the test a second time, as
# mutmut's fork server does (it collects, then forks a worker that collects again):
# the worker then asks for an id that does not exist, pytest exits 4, and mutmut
# reports every mutant those tests cover as a "timeout", untested. Refuse up front.
"$PYTHON" - <<'PY'
import subprocess, sys, tomllib
with open("pyproject.toml", "rb") as f:
    selection = tomllib.load(f)["tool"]["mutmut"]["pytest_add_cli_args_test_selection"]
out = subprocess.run(
    [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *selection],
    capture_output=True, text=True, check=True,
).stdout
bad = [line for line in out.splitlines()
       if "::" in line and ("\\" in line or not (line.isascii() and line.isprintable()))]
if bad:
    print("test ids mutmut's fork server cannot select (give them plain ASCII ids):", file=sys.stderr)
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
PY

rm -rf mutants
mkdir -p mutants mutation-report
for m in "${modules[@]}"; do
  # shellcheck disable=SC2086
  read -r -a patterns <<< "$(echo ${SCOPE[$m]})"
  start=$(date +%s)
  nice -n 19 "$MUTMUT" run --max-children "$CHILDREN" "${patterns[@]}" > "mutants/run-$m.log" 2>&1 || {
    echo "mutmut failed on $m; see mutants/run-$m.log" >&2
    exit 1
  }
  end=$(date +%s)
  "$MUTMUT" results --all true 2>/dev/null | python3 -c '
import collections, fnmatch, sys
module, seconds, patterns = sys.argv[1], sys.argv[2], sys.argv[3:]
counts = collections.Counter()
left = []
for line in sys.stdin:
    name, _, status = line.strip().rpartition(": ")
    if name and any(fnmatch.fnmatch(name, p) for p in patterns):
        counts[status] += 1
        if status != "killed":
            left.append(f"    {name}: {status}")
total = sum(counts.values())
with open(f"mutation-report/{module}.names", "w") as f:
    f.write("".join(name.strip().split(":")[0] + "\n" for name in left))
summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
print(f"{module}: {total} mutants in {seconds} s ({summary})")
print("\n".join(left))
' "$m" "$((end - start))" "${patterns[@]}"
  : > "mutation-report/$m.diff"
  while read -r name; do
    "$MUTMUT" show "$name" >> "mutation-report/$m.diff" 2>&1 || true
    echo >> "mutation-report/$m.diff"
  done < "mutation-report/$m.names"
done
