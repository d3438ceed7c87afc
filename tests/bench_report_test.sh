#!/usr/bin/env bash
# The HTML report in a real browser (CTest bench_report_browser): kf-bench times a tiny run on the best
# Vulkan device (lavapipe without a GPU; the CPU backend without Vulkan) and writes the report; kf-bench
# --render-only redraws it with PyTorch results to compare (tests/data: torch_bench.py's output on an H100
# at the same size, so the comparison bars draw; their ratios mean nothing here). Headless Chromium
# parses each report, and tests/bench_checks.py checks the DOM it built: every chart, one mark per result.
# Usage: bench_report_test.sh KF_BENCH SOURCE_DIR WORK_DIR
set -euo pipefail
bench=$1 src=$2 work=$3
rm -rf "$work"
mkdir -p "$work"
browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
  echo "chromium is not installed: tools/install-deps.sh installs it"
  [ "${CI:-}" = true ] && exit 1  # CI must run this test, not skip it
  exit 77
fi
run_bench() {
  "$bench" --backend "$1" --size-mib 1 --reps 3 --warmup 1 --warmup-ms 0 --dtypes f32,f16 --max-gflop 0.05 \
    --json "$work/kf.json" --html "$work/direct.html" > "$work/kf-bench.txt" 2>&1
}
if ! run_bench vulkan; then
  echo "kf-bench on Vulkan failed, trying the CPU backend:"
  tail -3 "$work/kf-bench.txt"
  run_bench cpu || { cat "$work/kf-bench.txt"; exit 1; }
fi
grep -E "^kf-bench on|copy bandwidth" "$work/kf-bench.txt"
eager=$src/tests/data/torch-eager-h100-1mib.json compile=$src/tests/data/torch-compile-h100-1mib.json
"$bench" --render-only --input "$work/kf.json" --compare "$eager" --compare "$compile" --html "$work/report.html"
# A saved run must render again byte for byte (the report depends on the JSON alone).
"$bench" --render-only --input "$work/kf.json" --html "$work/again.html"
cmp "$work/direct.html" "$work/again.html"

dump() {  # the DOM Chromium builds from a file (no sandbox: CI runs as root; no GPU needed)
  timeout 120 "$browser" --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run \
    --dump-dom "file://$1" 2> "$2.log" > "$2"
  [ -s "$2" ] || { echo "Chromium produced no DOM for $1:"; tail -20 "$2.log"; exit 1; }
}
dump "$work/direct.html" "$work/direct.dom.html"
python3 "$src/tests/bench_checks.py" dom "$work/direct.dom.html" "$work/kf.json"
dump "$work/report.html" "$work/report.dom.html"
python3 "$src/tests/bench_checks.py" dom "$work/report.dom.html" "$work/kf.json" "$eager" "$compile"
echo "reports: $work/direct.html $work/report.html"
