#!/usr/bin/env bash
# Session 17, fifth probe (H100): dropout on the CUDA warpgroup kernel (flash-wgmma, D <= 128: the keep bits
# drawn while S's wgmma runs, one Philox block per 4 keys, lane pairs trading blocks). Predicted: S 4096
# causal with dropout 4.04 ms (flash-mma, probe 4) -> 1.8-2.2 ms (flash-wgmma's plain causal 1.47 plus about
# 0.3-0.7 of generator work, part of it under the tensor cores); PyTorch's FlashAttention-2 2.13 ms in probe
# 4. Also checks the bf16 staging refactor of the Vulkan tensor-core forward (stage_bf16_as_f16 shared with
# the backward; its magnitudes at words + 1 .. + 3): the Vulkan forward's tensor-core tests (f16 and bf16,
# bf16 magnitudes), the dropout-mask tests (the wgmma shapes among them), the CUDA tensor-core tests, the
# attention conformance on both backends with validation.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
for t in "" attn_wmma=mma; do
  KF_TUNE=$t timeout 150 build/tools/kf-bench --backend cuda --no-unfused --reps 10 --dtypes f16,bf16 --ops '^attention$' --cases '^b4_h32_s(1024|4096)_d128_causal(_dropout)?$' --json "$out/fwd-cuda-$t.json" 2>&1 | grep -E '^attention'
done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_attention.py --cases-from "$out/fwd-cuda-.json" --out-dir "$out" --backends flash,cudnn
date +%T
timeout 300 build/tests/test_attention --gtest_filter='*DropoutMask*:AttentionCuda.TensorCoreKernelF16BF16:AttentionPaths.CooperativeMatrix*' 2>&1 | grep -E "^\[  (PASSED|FAILED)|^\[ *(FAILED|OK)|Failure|Expected|Which|variant|error" | head -40
date +%T
timeout 150 build/tools/kf-conformance --backend vulkan,cuda --validation --filter '^attention' 2>&1 | tail -2
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
