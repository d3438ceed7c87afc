#!/usr/bin/env bash
# Session 11, third probe (H100): (1) the CUDA backend on every memory-bound op, case and dtype of session
# 9's final run (the cluster sizes now automatic per op: parts of 4096 packs for softmax and the layer
# norms, 2048 for the rms norms and add forms); (2) Nsight Compute on the cluster kernels of layer_norm and
# rms_norm f16 over rows of 65536, and on cross_entropy_backward f32 at 131072 classes (0.78 of copy);
# (3) linear 16384 x 8192 x 8192: kf 0.88x PyTorch in probe 1 though both ran the same cuBLAS kernel at the
# same time under Nsight Compute: kf-bench warms up for >= 50 ms, torch_bench for 5 runs, so the
# comparison is run with kf-bench's warm-up cut to 1 run and torch_bench's raised to 40.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NCU=/usr/local/cuda/bin/ncu
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
OPS='^(adamw_step|add|add_dropout_residual|add_layer_norm|add_relu|add_rms_norm|add_sigmoid|batch_norm_relu|bias_gelu|bias_gelu_dropout|bias_gelu_tanh|bias_relu|bias_silu|cross_entropy|cross_entropy_backward|dropout|dropout_backward|geglu|gelu|gelu_backward|gelu_dropout|gelu_tanh|gelu_tanh_backward|group_norm|layer_norm|layer_norm_backward|layer_norm_gelu|layer_norm_relu|layer_norm_silu|log_softmax|mean_abs|mish|mish_backward|mish_scale|mse|mse_backward|mul|mul_relu|mul_tanh|prelu|prelu_bias|relu|relu_backward|rms_norm|rms_norm_backward|rms_norm_gelu|rms_norm_silu|sgd_step|sigmoid|sigmoid_backward|silu|silu_backward|softmax|softmax_backward|sum_squared|swiglu|tanh|tanh_backward)$'
$B --backend cuda --ops "$OPS" --all-cases --primitives --dtypes f32,f16,bf16 --reps 15 --no-unfused --json "$out/kf-cuda-mb.json" > "$out/kf-cuda-mb.txt" 2>&1; echo "cuda rc=$?"
date +%T
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis"
for op in layer_norm rms_norm; do
  echo "==== ncu $op f16 rows65536"
  timeout 120 $NCU $sec -k regex:cluster --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes f16 --ops "^$op\$" --cases '^rows65536$' 2>&1 | grep -vE '^(==PROF==|\[)' | grep -E '^ +[A-Z]|^  [a-z_]|Warning|OPT|Est' | cut -c1-160 | head -90
done
echo "==== ncu cross_entropy_backward f32 n1024_c131072"
timeout 120 $NCU $sec -k regex:xent --launch-count 2 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes f32 --ops '^cross_entropy_backward$' --cases '^n1024_c131072$' 2>&1 | grep -vE '^(==PROF==|\[)' | grep -E '^ +[A-Z]|^  [a-z_]|xent' | cut -c1-160 | head -120
date +%T
for i in 1 2; do
  $B --backend cuda --no-unfused --reps 20 --warmup 1 --warmup-ms 0 --dtypes f16,bf16 --ops '^linear$' --cases '^8192_bare$' --json "$out/kf-lin.json" 2>&1 | grep -E '^linear'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --warmup 40 --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear' | sed 's/^/torch warmup 40: /'
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/torch_bench.py --modes eager --dtypes f16,bf16 --ops '^linear$' --cases-from "$out/kf-lin.json" --reps 20 --out-dir /tmp/tw 2>&1 | grep -E '^linear' | sed 's/^/torch warmup 5: /'
  $B --backend cuda --no-unfused --reps 20 --dtypes f16,bf16 --ops '^linear$' --cases '^8192_bare$' 2>&1 | grep -E '^linear' | sed 's/^/kf default warm-up: /'
done
date +%T
} > "$out/probe.log" 2>&1
gzip -f "$out/kf-cuda-mb.json"
cat "$out/probe.log" | tail -150
