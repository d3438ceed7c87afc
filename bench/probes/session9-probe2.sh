#!/usr/bin/env bash
# Session 9, second probe (H100): the CUDA flash-mma forward's machine code and where its warps stall:
# cuobjdump's SASS of attn_mma, Nsight Compute's instruction mix and its per-instruction source page.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
B=build/tools/kf-bench
CU=/usr/local/cuda/bin
{
date +%T
ls $CU | tr '\n' ' '; echo
$CU/cuobjdump -sass -fun '_ZN12_GLOBAL__N_18attn_mmaI6Half16I8HalfConvELi128ELi16EEEv10AttnParams' build/libkf.so > "$out/attn_mma_sass.txt" 2>&1 || true
wc -l "$out/attn_mma_sass.txt"
if [ "$(wc -l < "$out/attn_mma_sass.txt")" -lt 50 ]; then
  $CU/cuobjdump -sass build/libkf.so 2>/dev/null | awk '/Function : .*attn_mma.*Half16.*HalfConv.*128.*16/{p=1} p&&/Function : /&&!/attn_mma.*Half16.*HalfConv.*128.*16/{p=0} p' > "$out/attn_mma_sass.txt"
  wc -l "$out/attn_mma_sass.txt"
fi
args=(--backend cuda --no-unfused --reps 3 --warmup 1 --warmup-ms 0 --dtypes f16 --ops '^attention$' --cases 's4096_d128$')
timeout 200 $CU/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section InstructionStats --section WarpStateStats \
  --section SourceCounters --print-details all $B "${args[@]}" > "$out/ncu-mix.txt" 2>&1; echo "ncu mix rc=$?"
timeout 200 $CU/ncu --kernel-name regex:attn_mma --launch-skip 3 --launch-count 1 --section SourceCounters --section WarpStateStats \
  --page source --print-source sass --csv $B "${args[@]}" > "$out/ncu-source.csv" 2>&1; echo "ncu source rc=$?"
wc -c "$out"/*
date +%T
} > "$out/probe.log" 2>&1
cat "$out/probe.log"
