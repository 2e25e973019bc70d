#!/usr/bin/env bash
# run_bounded.sh SECONDS COMMAND [ARGS...]: runs COMMAND; if it is still running after SECONDS,
# prints one line naming it, then every process it started with its threads' stacks (through gdb,
# where installed), stops them all and exits 124. For scripted tests whose steps each take a few
# seconds: a stuck step fails at once with where it stuck, instead of at the test's timeout with
# nothing to show.
set -uo pipefail
limit="$1"; shift
descendants() {  # descendants PID: PID and every process under it, parents first
  local p="$1"
  echo "$p"
  for c in $(ps -o pid= --ppid "$p" 2>/dev/null); do descendants "$c"; done
}
"$@" &
pid=$!
for ((waited = 0; waited < limit * 10; ++waited)); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 0.1
done
echo "run_bounded: still running after ${limit} s: $*" >&2
procs="$(descendants "$pid")"
for p in $procs; do
  echo "== process $p: $(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-300)" >&2
  if command -v gdb > /dev/null; then
    timeout 60 gdb -p "$p" -batch -ex 'thread apply all bt 30' 2>/dev/null |
      grep -E '^(Thread|#)' >&2
  fi
done
# shellcheck disable=SC2086
kill -9 $procs 2>/dev/null
wait "$pid" 2>/dev/null
exit 124
