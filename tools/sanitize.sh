#!/usr/bin/env bash
# The sanitizer builds of the tests (tools/test.sh runs this after the main build; small shapes, within CI's
# time): AddressSanitizer + UndefinedBehaviorSanitizer on the unit tests of the core's paths, and
# ThreadSanitizer on the thread tests. Each is a build folder of its own (build-asan/, build-tsan/), without
# the CUDA backend, the tools or the Python package.
#   tools/sanitize.sh            (after tools/install-deps.sh --tests)
# KF_SPIRV_FROM=build (tools/test.sh sets it, having just built build/ from this tree): the sanitizer builds
# embed that build's compiled shaders instead of compiling them again.
# Leaks: LeakSanitizer runs on the CPU backend with no Vulkan driver visible. A Vulkan driver that the loader
# unloads at vkDestroyInstance leaves allocations that LeakSanitizer can no longer attribute (frames in an
# unmapped library, which no suppression can name); on Vulkan (lavapipe, validation layer on) the same
# tests run with leak detection off, every other check on.
set -uo pipefail
cd "$(dirname "$0")/.."
ASAN_TESTS=(test_api test_errors test_empty test_values test_graph test_threads test_score_mod test_wrap_host)
status=0
configure() {  # folder, options...
  local dir=$1
  shift
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKF_CUDA=OFF -DKF_BUILD_TOOLS=OFF -DKF_PYTHON=OFF \
    -DKF_SPIRV_FROM="${KF_SPIRV_FROM:-}" "$@" \
    > "$dir/configure.log" 2>&1 || { cat "$dir/configure.log"; return 1; }
}
run() {  # name, command...: the test's output only when it fails
  local name=$1 log
  shift
  log=$(mktemp)
  if "$@" > "$log" 2>&1; then
    echo "sanitize: $name passed ($(grep -E '^\[  PASSED' "$log" | head -1))"
  else
    echo "sanitize: $name FAILED"
    grep -E -A20 "ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error|\[  FAILED" "$log" | head -80
    status=1
  fi
  rm -f "$log"
}
mkdir -p build-asan build-tsan
if configure build-asan -DKF_SANITIZE=ON && cmake --build build-asan -j"$(nproc)" --target "${ASAN_TESTS[@]}"; then
  for t in "${ASAN_TESTS[@]}"; do
    run "$t (ASan+UBSan+LSan, CPU backend)" env VK_DRIVER_FILES=/nonexistent.json KF_BACKEND=cpu build-asan/tests/$t
    run "$t (ASan+UBSan, every device)" env ASAN_OPTIONS=detect_leaks=0 KF_VALIDATION=1 build-asan/tests/$t
  done
else
  echo "sanitize: the ASan build failed"; status=1
fi
if configure build-tsan -DKF_TSAN=ON && cmake --build build-tsan -j"$(nproc)" --target test_threads; then
  # Reports inside the Vulkan driver are suppressed (tests/tsan.supp: Mesa is not built with TSan).
  run "test_threads (TSan, every device)" env TSAN_OPTIONS="halt_on_error=1 suppressions=$PWD/tests/tsan.supp" \
    KF_VALIDATION=1 build-tsan/tests/test_threads
else
  echo "sanitize: the TSan build failed"; status=1
fi
exit $status
