#!/usr/bin/env bash
# The one test command (README): installs the dependencies, builds in Release and runs every test.
# Vulkan tests run with the Khronos validation layer on; without a GPU they run on Mesa's lavapipe
# (its "XDG_RUNTIME_DIR is invalid" warnings are harmless).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --tests
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
export KF_VALIDATION=1
ctest --test-dir build --output-on-failure -j2
