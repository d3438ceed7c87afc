#!/usr/bin/env bash
# Compiles the CUDA backend's sources (hal/cuda/) as HIP with hipcc, for the AMD targets the HIP backend
# aims at: gfx90a (MI200), gfx942 (MI300), gfx1100 (RDNA3, wave32). Nothing runs: this checks that the
# CUDA/HIP-common dialect (hal/cuda/gpu_compat.hpp) holds. Usage: tools/check-hip.sh [TARGETS...]
#
# Per target, the kernels (eltwise.cu, rows.cu, norm.cu, train.cu, attention.cu, attention_decode.cu, attention_mma.cu (nothing but its host stubs on HIP), attention_bwd.cu, attention_bwd_mma.cu, attention_keep.cu, attention_wgmma.cu (nothing but its host stubs on HIP) and conv.cu) are compiled to a code object. When this hipcc's compiler
# does not know a target, or its ROCm device library lacks that target's bitcode, the script says so and
# compiles what it can instead: the device code alone without the device library (front end and code
# generation, which checks the wavefront-size paths) and, for gfx942, gfx940 (the same GFX9.4 family).
# The host files (device.cpp, allocator.cpp, kernels.cpp, matmul.cpp, lce.cpp: no cuBLASLt on HIP) are compiled once against the HIP runtime.
# Exit status: 0 when every compile that this toolchain can attempt succeeded, or when there is no hipcc
# (a message says so); 1 when a compile failed.
set -uo pipefail
cd "$(dirname "$0")/.."
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gfx90a gfx942 gfx1100)

if ! command -v hipcc >/dev/null 2>&1; then
  echo "check-hip: hipcc not found; nothing compiled. Install a HIP toolchain (Debian 12: apt-get install hipcc,"
  echo "which brings ROCm 5.2 with clang 15; or ROCm from AMD) to check the HIP build of hal/cuda/."
  exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# -O0: the check is that the dialect compiles and code generation (instruction selection, register
# allocation) succeeds for each target; nothing produced here runs, and the optimizer's passes only cost CI
# time (the device code of eltwise.cu took 28 s a target at -O1, 11 s at -O0).
common=(-std=c++17 -O0 -I. -Iinclude -Isrc)
version=$(hipcc --version 2>/dev/null | grep -m1 -iE "HIP version|clang version" || true)
echo "check-hip: $(command -v hipcc) (${version:-version unknown})"
failed=0
summary=()

# compile LABEL ARGS...: runs hipcc, reports, and returns its status; the log goes to $out/LABEL.log.
compile() {
  local label=$1
  shift
  if hipcc "$@" > "$out/$label.log" 2>&1; then
    return 0
  fi
  return 1
}

reason_of() {  # the first line of hipcc's complaint
  grep -m1 -E "error|fatal" "$1" | sed 's/^.*error: //' | cut -c1-160
}

for t in "${targets[@]}"; do
  arch=$t  # gfx942 unknown to the compiler: gfx940 stands in (the same GFX9.4 family, wave64)
  for src in hal/cuda/*.cu; do
    label="$t-$(basename "$src" .cu)"
    if compile "$label" -x hip --offload-arch="$arch" "${common[@]}" -c "$src" -o "$out/$label.o"; then
      summary+=("$t: $src compiled to a code object for $arch")
      continue
    fi
    if [ "$arch" = "$t" ] && grep -qE "invalid target ID|unknown target CPU" "$out/$label.log"; then
      summary+=("$t: NOT CHECKED: this hipcc's compiler does not know $t ($(reason_of "$out/$label.log" | cut -c1-60)...)")
      [ "$t" = gfx942 ] || break
      arch=gfx940
      if compile "$label" -x hip --offload-arch="$arch" "${common[@]}" -c "$src" -o "$out/$label.o"; then
        summary+=("$t: $src compiled to a code object for gfx940 instead (same GFX9.4 family, wave64)")
        continue
      fi
    fi
    if grep -q "cannot find ROCm device library" "$out/$label.log"; then
      # Front end and code generation for the target without the device library (math calls stay external).
      if compile "$label-nolib" -x hip --offload-arch="$arch" -nogpulib --cuda-device-only -emit-llvm "${common[@]}" \
          -c "$src" -o "$out/$label.bc"; then
        summary+=("$t: $src device code compiled for $arch WITHOUT the ROCm device library (this ROCm lacks $arch's): front end and code generation only, not linked")
      else
        summary+=("$t: $src FAILED for $arch (device code, no device library): $(reason_of "$out/$label-nolib.log")"); failed=1
        sed 's/^/    /' "$out/$label-nolib.log" | head -30
      fi
    else
      summary+=("$t: $src FAILED for $arch: $(reason_of "$out/$label.log")"); failed=1
      sed 's/^/    /' "$out/$label.log" | head -40
    fi
  done
done

# Host code once: the runtime calls through gpu_compat.hpp's names (a HIP build defines KF_HIP).
for src in hal/cuda/device.cpp hal/cuda/allocator.cpp hal/cuda/kernels.cpp hal/cuda/matmul.cpp hal/cuda/lce.cpp; do
  label="host-$(basename "$src" .cpp)"
  if compile "$label" -DKF_HIP -x hip --offload-arch=gfx90a -std=c++20 -O1 -Wall -Wextra -Wno-missing-field-initializers \
      -I. -Iinclude -Isrc -c "$src" -o "$out/$label.o"; then
    summary+=("host: $src compiled")
  else
    summary+=("host: $src FAILED: $(reason_of "$out/$label.log")"); failed=1
    sed 's/^/    /' "$out/$label.log" | head -40
  fi
done

printf '%s\n' "${summary[@]}"
if [ $failed = 0 ]; then
  echo "check-hip: passed (every compile this toolchain can attempt succeeded; see NOT CHECKED / WITHOUT lines above)"
else
  echo "check-hip: FAILED"
fi
exit $failed
