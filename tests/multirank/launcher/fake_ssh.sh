#!/bin/sh
# Stands in for `ssh HOST COMMAND` in the hostfile tests: runs COMMAND here, as ssh would run it
# on HOST (through a shell), so ztrun's multi-node path runs end to end on one machine.
host="$1"
shift
[ -n "$host" ] || { echo "fake_ssh: no host" >&2; exit 255; }
exec /bin/sh -c "$1"
