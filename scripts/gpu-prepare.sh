#!/usr/bin/env bash
# Prepares, on this machine, what scripts/gpu-check.sh needs on a GPU machine that has CUDA,
# CMake, Ninja and a python3 with torch 2.x but no package registry: the headers (and CMake
# files) of CLI11, fmt, nlohmann-json, doctest and Asio, unpacked from Debian's packages into
# one folder, at most a few MiB (the device tool carries at most 64 MiB).
#   scripts/gpu-prepare.sh [DIR]      default: .gpu-bundle/ in the repository (git ignores it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bundle=${1:-$root/.gpu-bundle}
packages=(libcli11-dev libfmt-dev libfmt9 nlohmann-json3-dev doctest-dev libasio-dev)
debs=$(mktemp -d)
trap 'rm -rf "$debs"' EXIT
(cd "$debs" && apt-get download -qq "${packages[@]}" 2>/dev/null) || {
  apt-get -o DPkg::Lock::Timeout=600 update -qq
  (cd "$debs" && apt-get download -qq "${packages[@]}")
}
rm -rf "$bundle"
mkdir -p "$bundle"
for deb in "$debs"/*.deb; do dpkg-deb -x "$deb" "$bundle"; done
rm -rf "$bundle/usr/share/doc" "$bundle/usr/share/man" "$bundle/usr/share/lintian"
echo "gpu-prepare: $(du -sh "$bundle" | cut -f1) in $bundle"
