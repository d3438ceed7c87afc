#!/usr/bin/env bash
# Session 13, first probe (H100): what limits the long-row norms (rows of 65536), on both backends.
# (1) CUDA norm_cluster_kernel under Nsight Compute (bf16 layer_norm_gelu, 0.75 of copy; f32 layer_norm,
# 0.85) next to the short-row kernel (bf16 layer_norm_gelu over rows of 4096, 0.91): stall reasons, issue
# slots, occupancy, DRAM. (2) Vulkan PASS 3 (coop) norms: pipeline statistics (registers) and timings.
# (3) CUDA flash-mma forward (S 4096 f16): per-instruction SASS counts, for issue 7's last 5-10 %.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
NCU=/usr/local/cuda/bin/ncu
sec="--section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats"
filt() { grep -vE '^(==PROF==|\[)' | grep -E '^ +[A-Z]|^  [a-z_]' | grep -vE '^ +(----|OPT|INF|WRN)' | cut -c1-120; }
{
nvidia-smi --query-gpu=name,driver_version,temperature.gpu,power.draw --format=csv
date +%T
NORMS='^(layer_norm|layer_norm_gelu|rms_norm|rms_norm_gelu|add_rms_norm|softmax)$'
$B --backend cuda --no-unfused --reps 15 --dtypes f32,bf16 --ops "$NORMS" --cases '^rows(4096|65536)$' 2>&1 | grep -E '^[a-z_]+ +rows|copy bandwidth'
KF_PIPELINE_STATS=1 $B --backend vulkan --no-unfused --reps 15 --dtypes f32,bf16 --ops "$NORMS" --cases '^rows65536$' 2>&1 | grep -E '^[a-z_]+ +rows|copy bandwidth|norm|rows|register|shared' | cut -c1-200 | head -80
date +%T
for c in "bf16 layer_norm_gelu rows65536 norm_cluster" "f32 layer_norm rows65536 norm_cluster" "bf16 layer_norm_gelu rows4096 norm_cached"; do
  set -- $c
  echo "==== ncu $c"
  timeout 120 $NCU $sec -k regex:$4 --launch-skip 2 --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 3 --warmup-ms 0 --dtypes $1 --ops "^$2\$" --cases "^$3\$" 2>&1 | filt | head -90
done
date +%T
timeout 200 $NCU --section SourceCounters --section InstructionStats --page source --print-source sass --csv -k regex:norm_cluster --launch-skip 2 --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 3 --warmup-ms 0 --dtypes bf16 --ops '^layer_norm_gelu$' --cases '^rows65536$' > "$out/ncu-lngelu-source.csv" 2>&1; echo "ncu source rc=$? $(wc -l < "$out/ncu-lngelu-source.csv") lines"
timeout 200 $NCU --section SourceCounters --section InstructionStats --page source --print-source sass --csv -k regex:attn_mma --launch-count 1 $B --backend cuda --no-unfused --reps 1 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases '^b4_h32_s4096_d128$' > "$out/ncu-attn-source.csv" 2>&1; echo "ncu source rc=$? $(wc -l < "$out/ncu-attn-source.csv") lines"
gzip -f "$out"/ncu-*.csv
date +%T
} > "$out/probe.log" 2>&1
tail -40 "$out/probe.log"
