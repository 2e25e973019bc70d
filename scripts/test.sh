#!/usr/bin/env bash
# The test command: sets up, builds, and runs every test (unit and multirank) with ctest.
# Arguments go to ctest, e.g. `scripts/test.sh -L parallel`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
cd "$build"
# Two cores: run tests two at a time; multirank tests declare their process counts. Without
# arguments the `slow` label (the whole configuration space, hours) is left out; run it with
# `scripts/test.sh -L slow`.
[ "$#" -gt 0 ] || set -- -LE slow
ctest -j "${ZT_TEST_JOBS:-2}" --output-on-failure --timeout 900 "$@"
