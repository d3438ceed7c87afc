#!/usr/bin/env bash
# Session 11, second probe (H100): (1) test_norm and the norms' / softmax's CUDA conformance with the
# cluster kernels (probe 1's log did not come back); (2) the cluster size over rows of 65536, twice each in
# alternation (automatic, 2, 4, 8 blocks a cluster; 1 = none), since probe 1 ran each once and the best
# size differed by op and dtype; (3) which kernel PyTorch and kf run for linear 16384 x 8192 x 8192
# (bf16, f16) under Nsight Compute (kf 0.88-0.89x torch there in probe 1 with any of cuBLASLt's first 8
# heuristic answers).
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out/j"
B=build/tools/kf-bench
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
timeout 240 build/tests/test_norm --gtest_brief=1 2>&1 | tail -6
timeout 200 build/tools/kf-conformance --backend cuda --filter '^(layer_norm|rms_norm|layer_norm_(relu|gelu|silu)|rms_norm_(gelu|silu)|add_layer_norm|add_rms_norm|softmax|log_softmax|group_norm)$' --progress none 2>&1 | tail -4
date +%T
ops='^(layer_norm|layer_norm_relu|layer_norm_gelu|layer_norm_silu|rms_norm|rms_norm_gelu|rms_norm_silu|add_layer_norm|add_rms_norm|softmax|log_softmax)$'
for rep in 1 2; do
for c in 0 1 2 4 8; do
  echo "== cuda rows_cluster=$c rep $rep"
  KF_TUNE=$([ $c = 0 ] && echo "" || echo "rows_cluster=$c") $B --backend cuda --no-unfused --reps 15 --dtypes f32,f16,bf16 --ops "$ops" --cases '^rows65536$' --json "$out/j/rows-c$c-r$rep.json" 2>&1 | grep -E 'bandwidth \(|rror'
done
done
date +%T
for dt in bf16 f16; do
  timeout 120 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv python3 bench/probes/torch_linear_once.py 16384 8192 8192 $dt 2>&1 | grep -E 'gpu__time|allowed' | cut -c1-400
  timeout 120 /usr/local/cuda/bin/ncu --metrics gpu__time_duration.sum --csv $B --backend cuda --no-unfused --reps 2 --warmup 0 --warmup-ms 0 --dtypes $dt --ops '^linear$' --cases '^8192_bare$' 2>&1 | grep -E 'gpu__time' | cut -c1-400 | sort | uniq -c | sort -rn | head -4
done
date +%T
} > "$out/probe.log" 2>&1
tar czf "$out/j.tgz" -C "$out" j && rm -rf "$out/j"
cat "$out/probe.log"
