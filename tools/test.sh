#!/usr/bin/env bash
# The one test command (README): installs the dependencies, builds in Release and runs every test.
# Vulkan tests run with the Khronos validation layer on; without a GPU they run on Mesa's lavapipe
# (its "XDG_RUNTIME_DIR is invalid" warnings are harmless).
set -euo pipefail
cd "$(dirname "$0")/.."
tools/install-deps.sh --tests --python
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
export KF_VALIDATION=1
status=0
ctest --test-dir build --output-on-failure -j2 || status=$?
# The Python package (python/): its module built in build/python against the libkf above, then pytest.
{ cmake -S . -B build -DKF_PYTHON=ON -DPython_EXECUTABLE="$PWD/.venv/bin/python" >/dev/null &&
  cmake --build build -j"$(nproc)" --target _kf &&
  PYTHONPATH=build/python .venv/bin/python -m pytest -q -p no:cacheprovider python/tests; } || status=$?
# The sanitizer builds (their own folders, small shapes): ASan + UBSan on the unit tests, TSan on the threads.
KF_SPIRV_FROM=$PWD/build tools/sanitize.sh || status=$?
# The libFuzzer targets (build-fuzz/, the CPU backend only): 60 s each from their seed corpora.
tools/fuzz.sh 60 || status=$?
if [ "$status" -ne 0 ]; then
  # A digest last, where a log that keeps only its head and tail still shows it: the failed conformance
  # cases (with their seeds, to rerun with kf-conformance --seed) and the failed GoogleTest assertions.
  echo "== digest of the failures =="
  python3 - build/conformance_*.json <<'PY' || true
import json, sys
for path in sys.argv[1:]:
    try:
        doc = json.load(open(path))
    except (OSError, ValueError):
        continue
    for dev in doc.get("devices", []):
        for r in dev.get("results", []):
            for c in r.get("cases", []):
                if c.get("status") == "fail":
                    msg = " | ".join(c.get("message", "").split("\n")[:4])
                    print(f"{dev.get('tag')} {r['op']} {r['dtype']} case {c['case']} seed {c.get('seed')}: {msg}"[:600])
PY
  grep -h -A3 -E "^\S+:[0-9]+: Failure|\[  FAILED  \]" build/Testing/Temporary/LastTest.log 2>/dev/null | head -60 || true
fi
exit "$status"
