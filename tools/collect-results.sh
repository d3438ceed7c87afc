#!/usr/bin/env bash
# Regenerates bench/results/<device model>/, the curated results of one device: what docs/performance.md
# quotes. Run it from the repository root on a machine with the GPU, after a Release build:
#
#   tools/collect-results.sh [BUILD_DIR]        (BUILD_DIR defaults to build/)
#
# It replaces the folder's contents with one full run:
#   kf-info.txt                       the devices and which one is picked
#   conformance.txt, conformance.xml  kf-conformance on every device found (the Vulkan GPU, CUDA when built)
#   kf-vulkan.json, kf-cuda.json      kf-bench on each backend (bench/SCHEMA.md)
#   torch-eager.json, torch-compile.json   bench/torch_bench.py on the same cases, when PyTorch with CUDA imports
#   report.html                       kf-bench's report of the Vulkan run, compared with CUDA and PyTorch
#   decode-step-<backend>.json, decode-step-torch.json   one decoding step of a Llama-7B-shaped model
#                                     (kf-decode-step, bench/torch_decode_step.py when PyTorch with CUDA imports)
#   fusion-models.json                bench/fusion_models.py (kernelfusion.optimize on real models against
#                                     eager and torch.compile), when the Python package is built
#                                     (build/python) and PyTorch with CUDA, transformers and torchvision import
#
# Environment: SIZE_MIB (256), REPS (30), OPS (regular expression, every op), DTYPES (f32,f16,bf16),
# SKIP_CONFORMANCE=1, SKIP_TORCH=1, OUT (the folder, instead of bench/results/<model>), MINILM_DIR (the
# all-MiniLM-L6-v2 weights for fusion-models.json; without it, that architecture with random weights).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
[ -x "$build/tools/kf-info" ] || { echo "no $build/tools/kf-info: build first (cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build)"; exit 2; }
size=${SIZE_MIB:-256}
reps=${REPS:-30}
ops=${OPS:-.*}
dtypes=${DTYPES:-f32,f16,bf16}
status=0

info=$("$build/tools/kf-info") || { echo "$info"; exit 1; }
# The folder is named after the GPU model ("NVIDIA H100 80GB HBM3" -> h100), else the picked device.
name=$(printf '%s\n' "$info" | sed -n 's/^Context::create() picks: [a-z]* [0-9]*: *//p' | head -1)
model=$(printf '%s\n' "$name" | grep -oE '\b[A-Z]{1,3}[0-9]{2,4}[A-Z]?\b' | head -1 | tr 'A-Z' 'a-z')
[ -n "$model" ] || model=$(printf '%s\n' "$name" | tr 'A-Z ' 'a-z-' | tr -cd 'a-z0-9-' | cut -c1-40)
out=${OUT:-bench/results/${model:-local}}
rm -rf "$out" && mkdir -p "$out"
printf '%s\n' "$info" > "$out/kf-info.txt"
echo "device: $name -> $out"

if [ "${SKIP_CONFORMANCE:-0}" != 1 ]; then
  "$build/tools/kf-conformance" --junit "$out/conformance.xml" > "$out/conformance.txt" 2>&1 || status=1
  tail -3 "$out/conformance.txt"
fi

backends=(vulkan)
grep -q "^== cuda" "$out/kf-info.txt" && backends+=(cuda)
for b in "${backends[@]}"; do
  "$build/tools/kf-bench" --backend "$b" --ops "$ops" --dtypes "$dtypes" --size-mib "$size" --reps "$reps" \
    --json "$out/kf-$b.json" > "$out/kf-$b.txt" 2>&1 || status=1
  tail -1 "$out/kf-$b.txt"; rm -f "$out/kf-$b.txt"
done

for b in "${backends[@]}"; do
  "$build/tools/kf-decode-step" --backend "$b" --json "$out/decode-step-$b.json" > /dev/null 2>&1 || status=1
done
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 bench/torch_decode_step.py --json "$out/decode-step-torch.json" > /dev/null 2>&1 || status=1
fi

compare=()
[ -f "$out/kf-cuda.json" ] && compare+=(--compare "$out/kf-cuda.json")
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  python3 bench/torch_bench.py --cases-from "$out/kf-vulkan.json" --reps "$reps" --out-dir "$out" > "$out/torch.log" 2>&1 || status=1
  tail -1 "$out/torch.log"; rm -f "$out/torch.log"
  for m in eager compile; do [ -f "$out/torch-$m.json" ] && compare+=(--compare "$out/torch-$m.json"); done
fi
if [ "${SKIP_TORCH:-0}" != 1 ] && [ -d "$build/python/kernelfusion" ] && PYTHONPATH="$build/python" python3 -c \
    "import torch, transformers, torchvision, kernelfusion, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  PYTHONPATH="$build/python" python3 bench/fusion_models.py ${MINILM_DIR:+--minilm-dir "$MINILM_DIR"} \
    --json "$out/fusion-models.json" > /dev/null 2>&1 || status=1
fi
"$build/tools/kf-bench" --render-only --input "$out/kf-vulkan.json" "${compare[@]}" --html "$out/report.html" > /dev/null || status=1
ls -la "$out"
exit $status
