#!/usr/bin/env bash
# Packs a Release build's run-time files (libkf, the tools, the test binaries) into .gpu/kf.tar.xz (xz: about
# 13 MB where gzip made 22, so that the bundle, the working tree and the Vulkan loader's packages fit the
# device tool's 64 MiB together); there, `tar xf .gpu/kf.tar.xz` restores build/ and
# LD_LIBRARY_PATH=$PWD/build finds libkf.
# Usage: tools/gpu-bundle.sh [BUILD_DIR]   (.gpu/ is git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
mkdir -p .gpu
files=("$b"/libkf.so* "$b"/tools/kf-* "$b"/tests/test_* "$b"/tests/check_conformance_report "$b"/tests/usage_example)
rm -f .gpu/kf.tar.gz .gpu/kf.tar.xz
tar cf - --transform "s,^$b/,build/," "${files[@]}" | xz -T2 -6 > .gpu/kf.tar.xz
ls -la .gpu/kf.tar.xz
