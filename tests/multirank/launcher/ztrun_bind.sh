#!/bin/bash
# ztrun --bind-cores-to-rank end to end: zt_affinity_probe ranks started by ztrun report their
# affinity mask, OMP_NUM_THREADS and memory policy, under --transport native and, when ztrun finds
# OpenMPI's mpirun, --transport mpi (OpenMPI binds them from ztrun's rankfile). Every rank's cores
# must be the ones `ztrun --dry-run` plans, disjoint from the other ranks', inside the test's own
# affinity mask, with OMP_NUM_THREADS to match; without the flag nothing is bound; bad lists are
# rejected with one line and a non-zero exit before anything starts.
#
# usage: ztrun_bind.sh ZTRUN AFFINITY_PROBE    (exit 77: fewer than 2 CPUs to bind, skipped)
set -euo pipefail
ztrun="$1"
probe="$2"
fail() { echo "FAIL: $*"; exit 1; }

work="$(mktemp -d /tmp/zt_bind.XXXXXX)"
trap 'rm -rf "$work"' EXIT
trap "exit 143" INT TERM
unset OMP_NUM_THREADS KMP_AFFINITY

# "0-2,5" -> 0 1 2 5, one a line.
expand() {
  local IFS=, r
  for r in $1; do
    if [[ $r == *-* ]]; then seq "${r%-*}" "${r#*-}"; else echo "$r"; fi
  done
}
# field NAME LINE: the value of NAME=... in a probe or dry-run line.
field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }

allowed="$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)"
mapfile -t cpus < <(expand "$allowed")
if [ "${#cpus[@]}" -lt 2 ]; then
  echo "SKIP: binding 2 ranks needs 2 CPUs; this test may run on $allowed"
  exit 77
fi
first="${cpus[0]}"
second="${cpus[1]}"

transports=(native)
if "$ztrun" --standalone --transport mpi --dry-run /bin/true >/dev/null 2>&1; then
  transports+=(mpi)
else
  echo "note: ztrun finds no OpenMPI mpirun; --transport native only"
fi

# launch NAME TRANSPORT NPROC EXPECTED [ZTRUN FLAGS...]: the plan (--dry-run) and a real launch
# of NPROC probes; EXPECTED is each rank's cores separated by spaces ("" when the plan decides,
# "-" when nothing may be bound). Checks every rank against the plan and the others.
launch() {
  local name="$1" transport="$2" nproc="$3" expected="$4"
  shift 4
  local args=(--standalone --transport "$transport" --nproc-per-node "$nproc" "$@")
  "$ztrun" "${args[@]}" --dry-run "$probe" >"$work/plan" 2>&1 ||
    { cat "$work/plan"; fail "$name: ztrun --dry-run"; }
  timeout -s KILL 60 "$ztrun" "${args[@]}" "$probe" >"$work/out" 2>&1 ||
    { cat "$work/out"; fail "$name: the launch"; }
  local -a want=($expected)
  local r line plan cores omp plan_omp seen=""
  for ((r = 0; r < nproc; r++)); do
    line="$(grep "^\[$r\] affinity " "$work/out")" || { cat "$work/out"; fail "$name: no rank $r"; }
    plan="$(grep "^rank $r: " "$work/plan")" || { cat "$work/plan"; fail "$name: rank $r unplanned"; }
    cores="$(field cpus "$line")"
    omp="$(field omp "$line")"
    plan_omp="$(field OMP_NUM_THREADS "$plan")"
    [ "$omp" = "$plan_omp" ] || fail "$name: rank $r has OMP_NUM_THREADS=$omp, planned $plan_omp"
    if [ "$expected" = "-" ]; then
      [ "$cores" = "$allowed" ] || fail "$name: rank $r bound to $cores without the flag"
      grep -q " cores=" <<<"$plan" && fail "$name: cores planned without the flag: $plan"
      continue
    fi
    [ "$cores" = "$(field cores "$plan")" ] ||
      fail "$name: rank $r runs on $cores, planned $(field cores "$plan")"
    [ -z "$expected" ] || [ "$cores" = "${want[$r]}" ] ||
      fail "$name: rank $r runs on $cores, expected ${want[$r]}"
    [ "$omp" = "$(field ncpus "$line")" ] ||
      fail "$name: rank $r has OMP_NUM_THREADS=$omp for $(field ncpus "$line") cores"
    if [ "$transport" = native ]; then
      # Memory is bound only with several NUMA nodes (numa= in the plan); OpenMPI's local_only
      # policy is not checked under mpi.
      local numa policy want_policy=default
      numa="$(field numa "$plan")"
      policy="$(field mempolicy "$line")"
      if [ -n "$numa" ]; then want_policy="bind:$numa"; fi
      [ "$policy" = "$want_policy" ] ||
        fail "$name: rank $r memory policy $policy, planned $want_policy"
    else
      grep -q "^RANKFILE: rank $r=localhost slot=$cores\$" "$work/plan" ||
        { cat "$work/plan"; fail "$name: the rankfile does not bind rank $r to $cores"; }
    fi
    local c
    for c in $(expand "$cores"); do
      grep -qx "$c" < <(printf '%s\n' "${cpus[@]}") || fail "$name: rank $r on CPU $c, not ours"
      seen+="$c"$'\n'
    done
  done
  [ -z "$(sort -n <<<"$seen" | uniq -d | grep .)" ] ||
    fail "$name: ranks share CPUs: $(grep affinity "$work/out" | tr '\n' ' ')"
  echo "ok: $name: $(grep -o 'affinity .*' "$work/out" | sort | tr '\n' ';')"
}

for t in "${transports[@]}"; do
  launch "$t, not bound" "$t" 2 "-"
  launch "$t, default cores" "$t" 2 "" --bind-cores-to-rank
  launch "$t, --bind-core-list $second" "$t" 1 "$second" --bind-cores-to-rank \
    --bind-core-list "$second"
  launch "$t, DeepSpeed spelling" "$t" 2 "$first $second" --bind_cores_to_rank \
    --bind_core_list="$first,$second"
  # An inherited OMP_NUM_THREADS gives way to the plan (as in DeepSpeed); --env's is kept.
  OMP_NUM_THREADS=7 launch "$t, OMP_NUM_THREADS=7 inherited" "$t" 2 "" --bind-cores-to-rank
  grep -q "OMP_NUM_THREADS=7 from the environment replaced by" "$work/out" ||
    { cat "$work/out"; fail "$t: no line about the replaced OMP_NUM_THREADS"; }
  "$ztrun" --standalone --transport "$t" --nproc-per-node 2 --bind-cores-to-rank \
    --env OMP_NUM_THREADS=3 "$probe" >"$work/out" 2>&1 || { cat "$work/out"; fail "$t: --env"; }
  [ "$(grep -c "affinity .* omp=3 " "$work/out")" = 2 ] ||
    { cat "$work/out"; fail "$t: --env OMP_NUM_THREADS=3 not kept"; }
  echo "ok: $t, --env OMP_NUM_THREADS=3 kept"
done

# rejected NAME EXPECTED [ZTRUN ARGS...]: exits non-zero with one line, the error naming the flag.
rejected() {
  local name="$1" expected="$2"
  shift 2
  local rc=0
  "$@" >"$work/out" 2>&1 || rc=$?
  [ "$rc" -ne 0 ] || { cat "$work/out"; fail "$name: accepted"; }
  [ "$(wc -l <"$work/out")" = 1 ] || { cat "$work/out"; fail "$name: not one line"; }
  grep -qF "ztrun: error: $expected" "$work/out" || { cat "$work/out"; fail "$name: message"; }
  echo "ok: $name rejected: $(cat "$work/out")"
}
bind=("$ztrun" --standalone --transport native --bind-cores-to-rank)
rejected "range backwards" "--bind-core-list: '3-1' in '0,3-1' is neither a core number nor" \
  "${bind[@]}" --bind-core-list 0,3-1 "$probe"
rejected "list not ascending" "--bind-core-list: '$first' in '$second,$first' overlaps or comes" \
  "${bind[@]}" --bind-core-list "$second,$first" "$probe"
rejected "not a number" "--bind-core-list: 'x' in 'x' is neither" \
  "${bind[@]}" --bind-core-list x "$probe"
rejected "core outside the mask" "--bind-core-list: core 65000 is not one ztrun may run on" \
  "${bind[@]}" --bind-core-list 65000 "$probe"
rejected "more ranks than listed cores" "--bind-cores-to-rank: 2 local ranks but 1 core" \
  "${bind[@]}" --nproc-per-node 2 --bind-core-list "$first" "$probe"
rejected "list without the flag" "--bind-core-list needs --bind-cores-to-rank" \
  "$ztrun" --standalone --bind-core-list "$first" "$probe"
rejected "KMP_AFFINITY set" "--bind-cores-to-rank: KMP_AFFINITY is set" \
  env KMP_AFFINITY=compact "${bind[@]}" "$probe"
if command -v taskset >/dev/null; then
  # ztrun reads its own affinity mask: one CPU left to it cannot host two bound ranks.
  rejected "more ranks than ztrun's CPUs" "--bind-cores-to-rank: 2 local ranks but 1 core" \
    taskset -c "$first" "${bind[@]}" --nproc-per-node 2 "$probe"
fi
echo "PASS: ztrun --bind-cores-to-rank (${transports[*]})"
