#!/usr/bin/env bash
# Session 6, seventh probe (H100): cross_entropy with 16-bit logits cached raw (64 per invocation in the
# registers of 32 floats); rows_values 32 (the old count) for comparison.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench xent --backend vulkan --all-cases --dtypes f32,f16,bf16 --ops '^cross_entropy'
KF_TUNE=rows_values=32 bench xent-rv32 --backend vulkan --all-cases --dtypes f16 --ops '^cross_entropy'

