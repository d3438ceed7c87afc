#!/usr/bin/env bash
# Session 20, probe 2 (H100): Vulkan norms over rows of 65536 (issue 4: 0.74-0.91 of copy with PASS 3, P
# workgroups per row exchanging statistics). New PASS 4 (KF_TUNE rows_coop=4): one workgroup per row streams
# it twice, the second read from L2, as many workgroups as keep their rows within rows_stream_mib of L2.
# Predicted: if the second read hits L2, 0.85-0.95 of copy (no exchange, no spin; one workgroup reduction a
# row); if it misses, about 0.67 (three transfers where a copy makes two). Budgets 16 / 32 / 64 MiB, batches
# of 8 packs (default) and 4 (rows_values=16 / 32); PASS 3 (rows_coop=2, the default) alternated with it.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/build
B=build/tools/kf-bench
NORMS='^(layer_norm|layer_norm_gelu|rms_norm|add_rms_norm|add_layer_norm)$'
run() {  # $1: KF_TUNE, $2: dtypes
  echo "== KF_TUNE=$1"
  KF_TUNE=$1 timeout 120 $B --backend vulkan --no-unfused --reps 15 --dtypes $2 --ops "$NORMS" --cases '^rows65536$' \
    --json "$out/mb-$(echo $1 | tr ',=' '__')-$2.json" 2>&1 | grep -E '^[a-z_]+ +rows|copy bandwidth' | cut -c1-150
}
{
date +%T
for t in rows_coop=2 rows_coop=4 rows_coop=4,rows_stream_mib=16 rows_coop=4,rows_stream_mib=64 rows_coop=2 rows_coop=4; do
  run $t f32,f16,bf16
done
run rows_coop=4,rows_values=16 f32
date +%T
} > "$out/probe2.log" 2>&1
tar czf "$out/probe2-json.tgz" -C "$out" $(cd "$out" && ls mb-*.json) && rm -f "$out"/mb-*.json
cat "$out/probe2.log"
