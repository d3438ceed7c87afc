#!/usr/bin/env bash
# Session 9, third probe (H100): the CUDA flash-mma forward with the base-2 softmax (one FFMA and one
# ex2.approx.ftz a score, the O rescale skipped where no row's max grew) against the build before it
# (old/, same call), PyTorch's FlashAttention-2 on the same cases, Nsight Compute's instruction count of
# the new kernel; the CUDA attention tests and conformance; bf16 norms with 16 values an invocation.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
log="$out/probe.log"
{
date +%T
for v in new; do  # (the build before it did not fit beside this one in the 64 MiB a call carries)
  echo "== $v"
  if [ $v = old ]; then L=$PWD/old/build; else L=$PWD/build; fi
  LD_LIBRARY_PATH=$L $L/tools/kf-bench --backend cuda --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --all-cases --json "$out/attn-$v.json" 2>&1 | grep -E '^attention'
done
echo "== new, 32 rows a warp"
KF_TUNE=attn_rows_per_warp=32 $B --backend cuda --no-unfused --reps 10 --size-mib 128 --dtypes f16,bf16 --ops '^attention$' --all-cases --json "$out/attn-new32.json" 2>&1 | grep -E '^attention'
date +%T
PYTHONUNBUFFERED=1 timeout 200 python3 bench/torch_attention.py --cases-from "$out/attn-new.json" --backends flash --out-dir "$out" 2>&1 | grep -vE '^\s*$' | tail -16
date +%T
timeout 120 /usr/local/cuda/bin/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section InstructionStats --section SpeedOfLight --section WarpStateStats \
  $B --backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$' 2>&1 | grep -E "Executed Instructions  |Duration|Issue|Warp Cycles Per Issued|Compute \(SM\)|attn_mma"
date +%T
KF_BACKEND=cuda timeout 200 build/tests/test_attention --gtest_brief=1 2>&1 | tail -4
build/tools/kf-conformance --backend cuda --filter '^attention' --progress none 2>&1 | tail -8
date +%T
echo "== bf16 norms, rows_values 32 (default) / 16"
for rv in 32 16; do
  KF_TUNE=rows_values=$rv $B --backend vulkan --no-unfused --reps 15 --dtypes bf16,f16 --ops '^(rms_norm|layer_norm|softmax|add_rms_norm|rms_norm_backward)$' --cases 'rows4096' 2>&1 | grep -E '^(copy|rms|layer|softmax|add)'
done
date +%T
} > "$log" 2>&1
cat "$log"
