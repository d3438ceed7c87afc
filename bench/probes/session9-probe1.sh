#!/usr/bin/env bash
# Session 9, first probe (H100): (1) the tensor-core path's ceiling with fragments built element by element
# from shared memory (KF_TUNE mm_peak=6..8) against coopMatLoadNV (mm_peak=1) and registers only (default);
# (2) the accumulator and f16 fragment layouts (KF_COOPMAT_LAYOUT); (3) bf16 memory-bound ops after
# pack_bf16x2 (to set against session 8's final run) and torch.compile's bf16 norms in the same call;
# (4) Nsight Compute on the CUDA flash-mma forward, if ncu is there.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
OPS='^(adamw_step|add_dropout_residual|add_layer_norm|add_relu|add_rms_norm|add_sigmoid|batch_norm_relu|bias_gelu|bias_gelu_dropout|bias_gelu_tanh|bias_relu|bias_silu|cross_entropy|cross_entropy_backward|dropout|dropout_backward|geglu|gelu_backward|gelu_dropout|gelu_tanh_backward|group_norm|layer_norm|layer_norm_backward|layer_norm_gelu|layer_norm_relu|layer_norm_silu|log_softmax|mean_abs|mish_backward|mish_scale|mse|mse_backward|mul_relu|mul_tanh|prelu_bias|relu_backward|rms_norm|rms_norm_backward|rms_norm_gelu|rms_norm_silu|sgd_step|sigmoid_backward|silu_backward|softmax|softmax_backward|sum_squared|swiglu|tanh_backward)$'
{
date +%T
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
echo "== matrix ceiling probes"
$B --backend vulkan --no-unfused --reps 10 --dtypes f16 --ops '^matmul$' --max-gflop 1 2>&1 | grep -i ceiling
for n in 1 6 7 8; do
  echo "-- mm_peak=$n"; KF_TUNE=mm_peak=$n $B --backend vulkan --no-unfused --reps 10 --dtypes f16 --ops '^matmul$' --max-gflop 1 2>&1 | grep -i ceiling
done
echo "== layouts (accumulator, then f16)"
KF_COOPMAT_LAYOUT=1 $B --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention$' --cases 's1024_d128$' 2>&1 | grep -i "layout" | head -33
KF_COOPMAT_LAYOUT=f16 $B --backend vulkan --no-unfused --reps 1 --dtypes f16 --ops '^attention$' --cases 's1024_d128$' 2>&1 | grep -i "layout" | head -33
date +%T
echo "== ncu"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  timeout 240 "$NCU" --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 \
    --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
    --section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
    $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$' > "$out/ncu-attn.txt" 2>&1
  echo "ncu rc=$?"; tail -5 "$out/ncu-attn.txt"
fi
date +%T
} > "$log" 2>&1
echo "== bf16 memory-bound" >> "$log"
$B --backend vulkan --ops "$OPS" --all-cases --no-unfused --dtypes bf16 --reps 15 --json "$out/kf-vulkan-bf16.json" > "$out/kf-vulkan-bf16.txt" 2>&1
echo "vulkan rc=$?" >> "$log"
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_bench.py --modes compile --dtypes bf16 --ops '^(layer_norm|rms_norm|cross_entropy)$' --cases-from "$out/kf-vulkan-bf16.json" --reps 15 --out-dir "$out" > "$out/torch-compile.log" 2>&1
echo "torch compile rc=$?" >> "$log"; date +%T >> "$log"
cat "$log"
