#!/usr/bin/env bash
# Session 6, first GPU probe (H100): (1) Vulkan decode attention over 128k keys in a fresh process, with
# several key-split counts, against CUDA on the same cases; (2) add_relu at 2048 MiB per input;
# (3) cross_entropy's pipeline statistics (registers) and rows_values settings in f32 / f16.
# Run from the repository root on the GPU machine with a Release build in build/.
set -u
out=${OUT:-/tmp/probe}; mkdir -p "$out"
b=build/tools
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv 
bench() { local tag=$1; shift; echo "== $tag"; "$b/kf-bench" --no-unfused --reps 20 "$@" 2>&1 | tee -a "$out/probe.log" | grep -vE '^$|^op '; }
bench dec-vk --backend vulkan --ops '^attention$' --cases decode --dtypes f16
for s in 4 32 64; do KF_TUNE=attn_decode=2,attn_split=$s bench dec-vk-split$s --backend vulkan --ops '^attention$' --cases decode --dtypes f16; done
#bench dec-cuda --backend cuda --ops '^attention$' --cases decode --dtypes f16
bench dec-vk-again --backend vulkan --ops '^attention$' --cases decode --dtypes f16
bench addrelu-2g --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 2048
bench addrelu-1g --backend vulkan --ops '^add_relu$' --dtypes f16 --size-mib 1024
KF_PIPELINE_STATS=1 bench xent-stats --backend vulkan --ops '^cross_entropy' --all-cases --dtypes f32,f16
for rv in 16 64; do KF_TUNE=rows_values=$rv bench xent-rv$rv --backend vulkan --ops '^cross_entropy' --all-cases --dtypes f16; done
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv
# The CUDA attention tests after the fold_sink refactor (sinks in the CUDA kernels).
#timeout 150 build/tests/test_attention --gtest_filter='*Cuda*:*Sink*:*sink*' 2>&1 | tail -15 
