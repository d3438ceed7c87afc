#!/usr/bin/env bash
# Session 10, second probe (H100): (1) CUDA linear + gelu with the epilogue kernel on the fast 16-bit gelu
# and 32-bit indices (it took 0.07-0.09 ms over the bare product in probe 1, torch's F.gelu 0.05),
# alternated with PyTorch eager; (2) Vulkan norms and softmax over rows of 65536 with smaller parts
# (KF_TUNE rows_values=16: 8 workgroups a row instead of 2-4; 32: 16-bit parts as floats, 4 a row), against the default in the same call.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
{
date +%T
for i in 1 2; do
  $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^(linear|linear_dropout)$' --cases '^(4096_bare|8192_bare|4096_gelu|8192_gelu|4096_gelu_p0.1)$' --json "$out/kf-lin$i.json" 2>&1 | grep -E '^(linear|matmul)'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^(linear|linear_dropout)$' --cases-from "$out/kf-lin$i.json" --reps 20 --out-dir /tmp/t$i 2>&1 | grep -E '^(linear|matmul)' | head -12
done
date +%T
ops='^(layer_norm|rms_norm|layer_norm_gelu|rms_norm_gelu|add_layer_norm|add_rms_norm|softmax)$'
for v in 0 16 32; do
  echo "== vulkan rows_values=$v"
  KF_TUNE=$([ $v = 0 ] && echo "" || echo "rows_values=$v") $B --backend vulkan --no-unfused --reps 10 --dtypes f32,f16,bf16 --ops "$ops" --cases rows65536 --json "$out/vk-rows-v$v.json" 2>&1 | grep -E '^(copy|layer|rms|add|softmax)|bandwidth'
done
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
