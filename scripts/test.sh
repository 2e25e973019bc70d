#!/usr/bin/env bash
# The test command: sets up, builds, and runs every test (unit and multirank) with ctest.
# Arguments go to ctest, e.g. `scripts/test.sh -L parallel`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${ZT_BUILD_DIR:-$root/build}"
bash "$root/scripts/build.sh"
# DeepSpeed for the tests that compare with the deepspeed package (they skip without it): its
# venv, without the CPUAdam JIT build (ZT_DS_SKIP_JIT), takes ~25 s to check when present; making
# it installs deepspeed from the package index, bounded to 4 minutes. ZT_TEST_DEEPSPEED=0 leaves
# it out; a failed or slow setup only makes those tests skip.
if [ "${ZT_TEST_DEEPSPEED:-1}" = 1 ]; then
  ZT_DS_SKIP_JIT=1 timeout 240 bash "$root/scripts/setup_deepspeed.sh" ||
    echo "[test] DeepSpeed setup failed; the tests against DeepSpeed will skip" >&2
fi
cd "$build"
# Two cores: run tests two at a time; multirank tests declare their process counts. Without
# arguments the `slow` label (the whole configuration space, hours) is left out; run it with
# `scripts/test.sh -L slow`.
[ "$#" -gt 0 ] || set -- -LE slow
ctest -j "${ZT_TEST_JOBS:-2}" --output-on-failure --timeout 900 "$@"
