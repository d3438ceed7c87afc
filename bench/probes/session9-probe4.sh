#!/usr/bin/env bash
# Session 9, fourth probe (H100): (1) Vulkan long rows with one reduction per part (a helper's rows2);
# (2) 16-bit norms over rows of 4096 at 16 values an invocation (the new default) with their activations;
# (3) the depthwise convolution kernels (a helper's dw) on both backends against PyTorch eager;
# (4) Nsight Compute's per-instruction page of the CUDA flash-mma 32-row form; (5) GPU tests.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
echo "== vulkan rows"
$B --backend vulkan --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops '^((add_)?(layer|rms)_norm(_gelu|_silu|_relu)?|(log_)?softmax)$' --all-cases --json "$out/rows.json" 2>&1 | grep -E '^(copy|rms|layer|add|softmax|log)'
echo "-- f16 softmax rows_coop=2"
KF_TUNE=rows_coop=2 $B --backend vulkan --no-unfused --reps 15 --dtypes f16 --ops '^(log_)?softmax$' --cases '^rows65536$' 2>&1 | grep -E '^(softmax|log)'
date +%T
echo "== depthwise"
for be in cuda vulkan; do
  $B --backend $be --no-unfused --reps 20 --dtypes f16,bf16,f32 --ops '^(conv2d|depthwise_pointwise)$' --cases mobilenet --json "$out/dw-$be.json" 2>&1 | grep -E '^(copy|conv|depth)'
done
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16,f32 --cases-from "$out/dw-cuda.json" --reps 20 --out-dir "$out" > "$out/torch-dw.log" 2>&1; echo "torch rc=$?"; grep -E "conv|depth" "$out/torch-dw.log" | tail -8
date +%T
echo "== cuda attention (32 rows a warp by default)"
$B --backend cuda --no-unfused --reps 10 --size-mib 128 --dtypes f16 --ops '^attention$' --cases 's(4096|16384)_d128' 2>&1 | grep -E '^attention'
timeout 150 /usr/local/cuda/bin/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section SourceCounters --section WarpStateStats --section InstructionStats --section Occupancy --section LaunchStats \
  --page source --print-source sass --csv $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$' > "$out/ncu-rw32.csv" 2>&1; echo "ncu rc=$?"
date +%T
echo "== tests"
KF_BACKEND=cuda timeout 200 build/tests/test_linalg --gtest_brief=1 2>&1 | tail -3
VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d KF_VALIDATION=1 timeout 200 build/tests/test_norm --gtest_brief=1 2>&1 | tail -3
VK_LAYER_PATH=/usr/share/vulkan/explicit_layer.d timeout 250 build/tools/kf-conformance --backend vulkan,cuda --validation --filter '^(conv2d|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise|layer_norm|rms_norm|add_layer_norm|add_rms_norm|softmax|log_softmax|layer_norm_gelu|attention)$' --progress none 2>&1 | tail -6
date +%T
} > "$log" 2>&1
cat "$log" | grep -v "^  .* pass " | head -150
