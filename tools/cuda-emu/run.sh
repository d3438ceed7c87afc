#!/usr/bin/env bash
# A host emulation of hal/cuda/attention.cu, attention_decode.cu, attention_mma.cu, attention_bwd.cu, train.cu, conv.cu, norm.cu, rows.cu and eltwise.cu, for machines without a GPU: it checks the kernels' logic
# (indexing, masks, splits, dropout index, RoPE positions, the combine pass, the wmma tiling) against the
# CPU backend; it cannot say anything about what only a GPU shows (fragment layouts, shared-memory limits,
# timing, races the emulation's barriers hide). Each block runs as blockDim std::threads (std::barrier for
# __syncthreads / __syncwarp, shuffles through memory); nvcuda::wmma is emulated with whole 16 x 16
# matrices in every lane (hal/cuda/gpu_compat.hpp and mma.h here replace the real ones); the kernel file
# is copied with its dynamic shared arrays and <<<...>>> launches rewritten. Needs g++ 12 (C++20
# std::barrier, _Float16) and a built libkf (any configuration) for the CPU reference.
#
#   tools/cuda-emu/run.sh BUILD_DIR [LABEL | extra | mma[:LABEL] | decode[:LABEL] | bwd[:LABEL] | lce[:LABEL] | conv | mem[:NAME]]
#     LABEL: only the registry cases of attention whose label contains it; extra: attention_scores,
#     embedding, and larger cases (several 64-row tiles, a decode with automatic key splits; flash-mma's
#     two forms where D is 64 or 128); mma[:LABEL]: flash-mma (attn_mma) with 16 and 32 rows a warp
#     (KF_TUNE attn_rows_per_warp; EMU_MMA_RW=16 or 32 runs one form) on the registry's D 64 / 128 cases
#     without RoPE and awkward shapes (those whose label contains LABEL); decode[:LABEL]: the
#     decode kernel (attn_decode + its combine pass) on one-query-row cases (D 8 to 256, G 1 to 16, key
#     lengths, window, ALiBi, soft-capping, sinks, lse, RoPE half and interleaved), f32 / f16 / bf16,
#     automatic and forced splits (LABEL: the cases whose label contains it); bwd:
#     attention_backward (attention_bwd.cu, driver_bwd.cpp) on the registry's cases (those whose label
#     contains LABEL) and a few awkward shapes, each tile, every dtype; lce: linear_cross_entropy and its
#     backward as hal/cuda/lce.cpp runs them (driver_lce.cpp), train.cu's row pass emulated and cuBLASLt
#     replaced by a plain product of the same arguments; conv: hal/cuda/conv.cu (each direct-kernel tile,
#     im2col) and train.cu's epilogue kernel on the convolutions' cases (conv_driver.cpp; EMU_VERBOSE=1
#     prints every comparison); mem[:NAME]: the memory-bound kernels of norm.cu, rows.cu, eltwise.cu and
#     train.cu's optimizers on registry and awkward shapes, every dtype, each layout, matmul.cpp's out_dtype form
#     (train.cu's conversion and epilogue kernels, the product itself on the host) on the registry's *_out_* cases, the norms',
#     softmax's and cross_entropy_backward's thread-block cluster kernels too (a cluster's blocks run at once: one cluster barrier, each
#     block's dynamic shared memory readable by the others) (driver_mem.cpp; NAME: the ops whose name
#     contains it; EMU_VERBOSE=1 prints every comparison).
# Exit status 0 when every comparison passes.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR [LABEL|extra|bwd[:LABEL]|lce[:LABEL]|conv|mem[:NAME]]}" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/hal/cuda"
cp "$here/hal/cuda/gpu_compat.hpp" "$work/hal/cuda/"
cp "$here/mma.h" "$work/"
cp "$here/hal/cuda/mma_ptx.cuh" "$work/hal/cuda/"
# The kernel files to emulate (each its own translation unit; attention_common.cuh and common.cuh are
# read from the source tree, gpu_compat.hpp from here): copied with their dynamic shared arrays and
# <<<...>>> launches rewritten.
emulate() {
python3 - "$root/hal/cuda/$1.cu" "$work/hal/cuda/$1_emu.cpp" <<'PY'
import re, sys
s = open(sys.argv[1]).read()
s = re.sub(r'extern __shared__ __align__\(\d+\) unsigned char (\w+)\[\];', r'unsigned char* \1 = emu_dyn_smem;', s)
s = re.sub(r'(\w+(?:<[^<>;]*>)?)<<<(.*?)>>>\((\w+)\);', r'emu_launch(\1, \2, \3);', s)
open(sys.argv[2], 'w').write(s)
PY
}
extra=()
mode="${2:-}"
if [ "$mode" = mem ] || [ "${mode#mem:}" != "$mode" ]; then
  srcs=()
  for f in norm rows eltwise train; do
    emulate $f
    srcs+=("$work/hal/cuda/${f}_emu.cpp")
  done
  srcs+=("$here/driver_mem.cpp")
  extra=(-DKF_EMU_APPROX=1)  # the 16-bit kernels' approximate exp and division, modelled (gpu_compat.hpp)
  args=("${2#mem}")
  args=("${args[0]#:}")
elif [ "${2:-}" = conv ]; then
  emulate conv
  emulate train
  srcs=("$work/hal/cuda/conv_emu.cpp" "$work/hal/cuda/train_emu.cpp" "$here/conv_driver.cpp")
  args=()
else
  srcs=()
  for f in attention attention_decode attention_mma attention_bwd attention_bwd_mma attention_keep attention_wgmma train; do  # attention_wgmma: its "none" stubs (no sm_90a here)
    emulate $f
    srcs+=("$work/hal/cuda/${f}_emu.cpp")
  done
  srcs+=("$here/driver.cpp" "$here/driver_bwd.cpp" "$here/driver_lce.cpp")
  args=("${2:-}")
fi
# -Dcuda=emucuda: the emulated kernels live in kf::hal::emucuda, apart from libkf's own.
g++ -std=c++20 -O2 -Dcuda=emucuda ${extra[@]+"${extra[@]}"} -I"$work" -I"$root" -I"$root/src" -I"$root/include" -x c++ \
  "${srcs[@]}" -o "$work/drv" -L"$build" -lkf -Wl,-rpath,"$build" -pthread
"$work/drv" "${args[@]}"
