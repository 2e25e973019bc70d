#!/usr/bin/env bash
# bench/gpu/fetch_config_deps.sh: fetches, on this (Debian) machine, the packages that the Python
# package zerotorch and the config reader need and a GPU image without apt lacks: yaml-cpp and
# Boost.Program_options, headers and shared libraries, as .deb files (about 10 MB) into
# .gpu-deps/ of the clone (git-ignored). Carried to the GPU machine with the clone,
# bench/gpu_check.sh unpacks them into its build folder (dpkg -x, nothing installed) and points
# CMake at them, so that its reduced build has the config reader, the Python package and the
# front-door rows. Debian 12's libraries need glibc 2.36 and GCC 12's libstdc++ or newer.
#
# usage: bash bench/gpu/fetch_config_deps.sh [DIR]   (DIR: .gpu-deps of the clone)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${1:-$root/.gpu-deps}"
packages=(libyaml-cpp-dev libyaml-cpp0.7 libboost1.74-dev libboost-program-options1.74-dev
          libboost-program-options1.74.0)
mkdir -p "$dir"
rm -f "$dir"/*.deb
# apt-get download writes to the working directory, as the _apt user where it can.
(cd "$dir" && apt-get download "${packages[@]}")
echo "fetched into $dir: $(ls "$dir" | tr '\n' ' ')($(du -sh "$dir" | cut -f1))"
