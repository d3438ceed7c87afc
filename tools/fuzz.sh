#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz/) as CI runs them (tools/test.sh calls this): built with clang in
# build-fuzz/ (the CPU backend only, the two fuzz targets alone, ASan + UBSan), then each run from its seed
# corpus for a bounded time. Longer runs by hand: tools/fuzz.sh 300 (docs/conformance.md, "Fuzzing").
#   tools/fuzz.sh [seconds per target, default 60]   (after tools/install-deps.sh --tests, which installs clang)
set -uo pipefail
cd "$(dirname "$0")/.."
secs=${1:-60}
command -v clang++ > /dev/null || { echo "fuzz: clang++ not found (tools/install-deps.sh --tests installs it)"; exit 1; }
mkdir -p build-fuzz
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Release -DKF_FUZZ=ON -DKF_VULKAN=OFF \
  -DKF_CUDA=OFF -DKF_BUILD_TOOLS=OFF -DKF_PYTHON=OFF > build-fuzz/configure.log 2>&1 ||
  { cat build-fuzz/configure.log; exit 1; }
cmake --build build-fuzz -j"$(nproc)" --target fuzz_score_mod fuzz_run || { echo "fuzz: the build failed"; exit 1; }
status=0
for t in score_mod run; do
  # libFuzzer adds what it finds to its first folder (a scratch one: the seeds stay as committed) and
  # writes a crashing input to build-fuzz/, named in its report.
  found=$(mktemp -d) log=$(mktemp)
  if build-fuzz/tests/fuzz/fuzz_$t -max_total_time="$secs" -rss_limit_mb=4096 -print_final_stats=1 \
       -artifact_prefix=build-fuzz/ "$found" tests/fuzz/corpus/$t > "$log" 2>&1; then
    echo "fuzz: fuzz_$t passed ($(awk '/stat::number_of_executed_units/ {print $2}' "$log") executions in $secs s, no crash)"
  else
    echo "fuzz: fuzz_$t FAILED"
    grep -E -A40 "ERROR: (AddressSanitizer|LeakSanitizer|libFuzzer)|runtime error|deadly signal" "$log" | head -80
    status=1
  fi
  rm -rf "$found" "$log"
done
exit $status
