#!/usr/bin/env bash
# The main job (README): installs the dependencies, builds in Release, then on the best device found
# (a GPU, else Mesa's lavapipe, else the CPU backend) prints the device, runs the conformance check
# and writes a benchmark report under bench/results/local/.
# Options through the environment: KF_DEVICE / KF_BACKEND pick the device, SIZE_MIB the benchmark size.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "${SKIP_DEPS:-0}" = 1 ] || tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
out=bench/results/local
mkdir -p "$out"
build/tools/kf-info | tee "$out/kf-info.txt"
picked=$(grep "Context::create() picks" "$out/kf-info.txt" || true)
# Large sizes on a GPU; a CPU (lavapipe or the CPU backend) gets small ones so the job ends in minutes,
# and skips the cases of more than 2 GFLOP (the matrix and attention cases: one attention call of the
# B4 H32 S1024 case takes 75 s on lavapipe with 2 cores).
if [[ "$picked" == *llvmpipe* || "$picked" == *"cpu"* ]]; then size=${SIZE_MIB:-8}; reps=5; gflop=2; else size=${SIZE_MIB:-256}; reps=30; gflop=0; fi
# Conformance on every device found; a failure is reported and the benchmark still runs.
status=0
build/tools/kf-conformance --json "$out/conformance.json" --junit "$out/conformance.xml" | tee "$out/conformance.txt" || status=$?
build/tools/kf-bench --size-mib "$size" --reps "$reps" --max-gflop "$gflop" --json "$out/bench.json" --html "$out/report.html" | tee "$out/bench.txt" || status=$?
echo "reports in $out/ (open report.html in a browser)"
exit $status
