#!/usr/bin/env bash
# The installed package from a user's side: `cmake --install` the build tree into a prefix,
# configure and build tests/install/project (find_package(zerotorch), zerotorch::zerotorch)
# against it alone, then train it a few steps with 2 ranks under the installed ztrun.
#   install_test.sh SOURCE_DIR BUILD_DIR WORK_DIR
set -euo pipefail
src=$1 build=$2 work=$3
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work"
cmake --install "$build" --prefix "$prefix" > "$work/install.log"
for f in bin/ztrun bin/zt-config bin/zt-pretokenize bin/zt-consolidate bin/zt-from-deepspeed \
         lib/libzt_core.so \
         include/zerotorch/train/initialize.h lib/cmake/zerotorch/zerotorchConfig.cmake; do
  [ -e "$prefix/$f" ] || { echo "install: $prefix/$f missing"; exit 1; }
done
if [ -e "$build/lib/libzt_cuda.so" ]; then
  [ -e "$prefix/lib/libzt_cuda.so" ] || { echo "install: the CUDA plugin is missing"; exit 1; }
fi
# The installed tools run from the prefix (their RPATH finds the installed libraries).
"$prefix/bin/zt-config" validate "$src/tests/install/project/my_train.yaml" > /dev/null
# Only the prefix: no path into the source or build tree (ccache, when present, keeps reruns fast).
launcher=()
if command -v ccache > /dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S "$src/tests/install/project" -B "$work/project" -G Ninja "${launcher[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release > "$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; exit 1; }
cmake --build "$work/project" > "$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
if ldd "$work/project/my_train" | grep -q "$build/lib"; then
  echo "my_train links the build tree's libraries, not the installed ones"; exit 1
fi
"$work/project/my_train" --make-shard "$work/shard.ztt"
"$prefix/bin/ztrun" --standalone --nproc-per-node 2 "$work/project/my_train" \
  --config "$src/tests/install/project/my_train.yaml" --shard "$work/shard.ztt" --steps 6
