#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the tools need.
# Usage: tools/install-deps.sh [--tests]   (runs apt-get as root, or through sudo when not root)
#   --tests: also what only the tests need (tools/test.sh passes it): Debian's hipcc for tools/check-hip.sh.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake ninja-build pkg-config
  libvulkan-dev libvulkan-volk-dev glslc glslang-tools glslang-dev spirv-tools libshaderc-dev
  libeigen3-dev libgtest-dev libgmock-dev
  mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  libcli11-dev nlohmann-json3-dev
  python3 chromium  # bench/torch_bench.py's plan check; the browser test of kf-bench's HTML report
)
# hipcc (with clang 15 and ROCm 5.2, about 600 MiB): tools/check-hip.sh, a CTest test, compiles hal/cuda/ as
# HIP with it; nothing runs on AMD here. The tests only: the main job does not need it.
if [ "${1:-}" = --tests ]; then PKGS+=(hipcc); fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PKGS[@]}"
