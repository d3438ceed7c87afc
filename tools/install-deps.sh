#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the tools need.
# Usage: tools/install-deps.sh   (runs apt-get as root, or through sudo when not root)
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
PKGS=(
  build-essential cmake ninja-build pkg-config
  libvulkan-dev libvulkan-volk-dev glslc glslang-tools spirv-tools libshaderc-dev
  libeigen3-dev libgtest-dev libgmock-dev
  mesa-vulkan-drivers vulkan-validationlayers vulkan-tools
  libcli11-dev nlohmann-json3-dev
  python3 chromium  # bench/torch_bench.py's plan check; the browser test of kf-bench's HTML report
  hipcc  # tools/check-hip.sh (a CTest test): hal/cuda/ compiled as HIP; nothing runs on AMD here
)
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PKGS[@]}"
