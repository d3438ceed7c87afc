#!/usr/bin/env bash
# Packs a Release build's run-time files (libkf, the tools, the test binaries) into .gpu/kf.tar.gz, small
# enough to travel to a GPU machine with the working tree (the device tool's 64 MiB limit); there,
# `tar xzf .gpu/kf.tar.gz` restores build/ and LD_LIBRARY_PATH=$PWD/build finds libkf.
# Usage: tools/gpu-bundle.sh [BUILD_DIR]   (.gpu/ is git-ignored)
set -euo pipefail
cd "$(dirname "$0")/.."
b=${1:-build}
mkdir -p .gpu
files=("$b"/libkf.so* "$b"/tools/kf-* "$b"/tests/test_* "$b"/tests/check_conformance_report "$b"/tests/usage_example)
tar czf .gpu/kf.tar.gz --transform "s,^$b/,build/," "${files[@]}"
ls -la .gpu/kf.tar.gz
