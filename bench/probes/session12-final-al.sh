#!/usr/bin/env bash
# Session 12, final attention and product run (H100): kf-bench attention (forward and decode) and the
# products on vulkan and cuda, PyTorch's scaled_dot_product_attention with FlashAttention-2 and cuDNN forced
# and PyTorch eager's products on the same cases; then the decode kernels' reduce-scatter form against the
# all-reduce form (KF_TUNE attn_decode_rs=1) on both backends, alternated; Nsight Compute's duration of the
# products' epilogue kernel on linear 16384 x 8192 x 8192 bf16 + gelu (272 us before this session).
set -u
out=${OUT:-/tmp/final}; mkdir -p "$out"
b=build/tools
OPS='^(linear|linear_dropout|matmul|ffn|ffn_swiglu|attention)$'
common=(--ops "$OPS" --all-cases --dtypes f16,bf16 --reps 10 --size-mib 128)
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T; "$b/kf-bench" --backend vulkan "${common[@]}" --json "$out/kf-vulkan-al.json" > "$out/kf-vulkan-al.txt" 2>&1; echo "vulkan rc=$?"
date +%T; "$b/kf-bench" --backend cuda "${common[@]}" --json "$out/kf-cuda-al.json" > "$out/kf-cuda-al.txt" 2>&1; echo "cuda rc=$?"
date +%T; PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|matmul)$' --cases-from "$out/kf-cuda-al.json" --reps 20 --out-dir "$out" > "$out/torch-linalg.log" 2>&1; echo "torch linear rc=$?"
PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_linalg.py --cases-from "$out/kf-cuda-al.json" --out-dir "$out" >> "$out/torch-linalg.log" 2>&1; echo "torch linalg rc=$?"
date +%T; PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/kf-cuda-al.json" --backends flash,cudnn --out-dir "$out" > "$out/torch-attention.log" 2>&1; echo "torch attention rc=$?"
date +%T
{
for i in 1 2; do
  for be in cuda vulkan; do
    for t in "" "attn_decode_rs=1"; do
      KF_TUNE=$t "$b/kf-bench" --backend $be --no-unfused --reps 20 --dtypes f16,bf16 --ops '^attention$' --cases '^decode_' 2>&1 | grep -E '^attention' | sed "s/^/$be '$t': /"
    done
  done
done
echo "==== ncu linear 8192_gelu bf16"
timeout 120 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:'nvjet|epilogue' --launch-count 4 "$b/kf-bench" --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes bf16 --ops '^linear$' --cases '^8192_gelu$' 2>&1 | grep -E '^  [a-zA-Z_]|duration|throughput' | cut -c1-150
} > "$out/decode-rs.txt" 2>&1
date +%T
(cd "$out" && tar czf al.tgz --remove-files kf-vulkan-al.json kf-cuda-al.json torch-*.json 2>/dev/null)
ls "$out"
