#!/usr/bin/env bash
# The CUDA backend's check on a machine with an NVIDIA GPU (issue 7). Run it from the repository root
# with a Release build configured with KF_CUDA=ON (the default when nvcc is found):
#
#   cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build -j
#   tools/gpu-check-cuda.sh [BUILD_DIR] [OUT_DIR]
#   (or, from inside the build folder: ../tools/gpu-check-cuda.sh; OUT_DIR defaults to BUILD_DIR/gpu-check-cuda)
#
# 1. kf-info: the CUDA device must be listed as usable (the script stops otherwise, saying why).
# 2. Correctness on the CUDA device alone (KF_BACKEND=cuda): every test binary of BUILD_DIR/tests and,
#    when built, kf-conformance --backend cuda (every op, dtype and registry case, and a second run that
#    must give the same bits). Failures are collected; the script goes on and exits 1 at the end.
# 3. kf-bench with --backend cuda and --backend vulkan on the same ops, dtypes, sizes and repetitions,
#    each writing JSON (bench/SCHEMA.md), then a table of the Vulkan / CUDA time ratio per op, case and
#    dtype (above 1: CUDA is faster) with each backend's fraction of its own copy bandwidth.
#
# Environment: DTYPES (f32,f16,bf16), SIZE_MIB (256), REPS (30), OPS (regular expression, all ops),
# UNFUSED=1 to also time the unfused chains, SANITIZE=1 to run compute-sanitizer (memcheck over the
# CUDA cases of test_ops, racecheck over the row and attention kernels), SKIP_TESTS=1 / SKIP_BENCH=1.
set -uo pipefail
# The build folder: the argument, else the current directory when it is one, else build/.
if [ $# -ge 1 ]; then build=$(cd "$1" && pwd) || exit 2
elif [ -f CMakeCache.txt ]; then build=$PWD
else build=$(cd "$(dirname "$0")/.." && pwd)/build
fi
out=${2:-$build/gpu-check-cuda}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
dtypes=${DTYPES:-f32,f16,bf16}
size=${SIZE_MIB:-256}
reps=${REPS:-30}
ops=${OPS:-.*}
failures=()
note() { printf '\n== %s\n' "$*"; }

[ -x "$build/tools/kf-info" ] || { echo "no $build/tools/kf-info: build first (see the top of $0)"; exit 2; }
unset KF_BACKEND KF_DEVICE

note "devices"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/nvidia-smi.txt"
"$build/tools/kf-info" --ops > "$out/kf-info.txt" 2>&1
"$build/tools/kf-info" --ops --json > "$out/kf-info.json" 2>/dev/null
grep -E "^(backends compiled in|== )|usable|Context::create" "$out/kf-info.txt"
if ! grep -q "^backends compiled in:.*cuda" "$out/kf-info.txt"; then
  echo "this build has no CUDA backend: configure with -DKF_CUDA=ON (nvcc on PATH)"; exit 2
fi
if ! KF_BACKEND=cuda "$build/tools/kf-info" --ops > "$out/kf-info-cuda.txt" 2>&1 ||
   grep -q "Context::create() fails" "$out/kf-info-cuda.txt"; then
  echo "no usable CUDA device:"; grep -A3 "== cuda" "$out/kf-info.txt"; exit 2
fi

# linear / matmul use cuBLASLt, opened at run time (hal/cuda/matmul.cpp): the loader's path, the toolkit, or
# PyTorch's nvidia wheels. When none of those has it, look for the file once and name it in KF_CUBLASLT.
if [ -z "${KF_CUBLASLT:-}" ] && grep -q "cuBLASLt is unavailable" "$out/kf-info-cuda.txt"; then
  lt=$(find /usr/local /usr/lib /opt /root /home -name 'libcublasLt.so.13' 2>/dev/null | head -1)
  [ -n "$lt" ] && export KF_CUBLASLT=$lt && echo "cuBLASLt: KF_CUBLASLT=$lt"
fi
grep -m1 "cuBLASLt is unavailable" "$out/kf-info-cuda.txt" >/dev/null && [ -z "${KF_CUBLASLT:-}" ] &&
  echo "cuBLASLt not found: linear and matmul will be reported unsupported on CUDA"

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  note "tests on the CUDA device (KF_BACKEND=cuda), logs in $out/tests"
  mkdir -p "$out/tests"
  for t in "$build"/tests/test_*; do
    [ -x "$t" ] && [ -f "$t" ] || continue
    name=$(basename "$t")
    start=$(date +%s)
    if KF_BACKEND=cuda "$t" --gtest_brief=1 > "$out/tests/$name.log" 2>&1; then status=passed; else status=FAILED; failures+=("$name"); fi
    # The CUDA cases must have run, not been skipped as unsupported.
    skipped=$(grep -c "unsupported on" "$out/tests/$name.log" || true)
    printf '%-22s %-7s %4ss  %s skipped as unsupported\n' "$name" "$status" "$(( $(date +%s) - start ))" "$skipped"
    grep "^\[  FAILED  \]" "$out/tests/$name.log" | sort -u | head -20 | sed 's/^/    /'
  done
  grep -ho "no CUDA kernel for [a-z_0-9]* yet" "$out"/tests/*.log | sort | uniq -c | sed 's/^/  /' || true
  if [ -x "$build/tools/kf-conformance" ]; then
    note "kf-conformance --backend cuda"
    if "$build/tools/kf-conformance" --backend cuda --json "$out/conformance-cuda.json" \
        --junit "$out/conformance-cuda.xml" > "$out/conformance-cuda.txt" 2>&1; then
      echo "passed"
    else
      echo "FAILED (exit $?)"; failures+=("kf-conformance")
    fi
    tail -5 "$out/conformance-cuda.txt"
  fi
  if [ "${SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    note "compute-sanitizer"
    KF_BACKEND=cuda compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/test_ops" --gtest_brief=1 \
      > "$out/memcheck.log" 2>&1 && echo "memcheck: clean" || { echo "memcheck: FAILED"; failures+=("memcheck"); }
    KF_BACKEND=cuda compute-sanitizer --tool racecheck --error-exitcode 3 "$build/tests/test_ops" --gtest_brief=1 \
      --gtest_filter='*softmax*:*sum_squared*:*mean_abs*:*norm*:*cross_entropy*:*mse*:*attention*:*embedding*' \
      > "$out/racecheck.log" 2>&1 &&
      echo "racecheck (rows, norms, losses, attention): clean" || { echo "racecheck: FAILED"; failures+=("racecheck"); }
  fi
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  bench=("$build/tools/kf-bench" --ops "$ops" --dtypes "$dtypes" --size-mib "$size" --reps "$reps")
  help=$("$build/tools/kf-bench" --help 2>&1)
  [[ "$help" == *--all-cases* ]] && bench+=(--all-cases)
  [[ "$help" == *--primitives* ]] && bench+=(--primitives)
  [[ "$help" == *--no-unfused* && "${UNFUSED:-0}" != 1 ]] && bench+=(--no-unfused)
  for backend in cuda vulkan; do
    note "kf-bench --backend $backend (${bench[*]:1})"
    if ! "${bench[@]}" --backend "$backend" --json "$out/bench-$backend.json" > "$out/bench-$backend.txt" 2>&1; then
      echo "kf-bench --backend $backend FAILED: see $out/bench-$backend.txt"; failures+=("kf-bench-$backend")
    fi
    tail -3 "$out/bench-$backend.txt"
  done
  if [ -f "$out/bench-cuda.json" ] && [ -f "$out/bench-vulkan.json" ]; then
    note "Vulkan / CUDA time per op (above 1: CUDA faster); written to $out/ratio.txt and ratio.json"
    python3 - "$out/bench-vulkan.json" "$out/bench-cuda.json" "$out/ratio.json" <<'EOF' | tee "$out/ratio.txt"
import json, math, sys
vk, cu = (json.load(open(p)) for p in sys.argv[1:3])
key = lambda r: (r["op"], r.get("case", ""), r.get("dtype", ""))
cuda = {key(r): r for r in cu["results"] if "ms" in r}
rows, by_dtype = [], {}
print(f"{'op':24} {'case':10} {'dtype':5} {'vulkan ms':>10} {'cuda ms':>10} {'vk/cuda':>8} {'vk copy%':>9} {'cuda copy%':>10}")
for r in vk["results"]:
    c = cuda.get(key(r))
    if "ms" not in r or c is None:
        continue
    ratio = r["ms"] / c["ms"]
    rows.append({"op": r["op"], "case": r["case"], "dtype": r["dtype"], "vulkan_ms": r["ms"], "cuda_ms": c["ms"],
                 "vulkan_over_cuda": ratio, "vulkan_fraction_of_copy": r.get("fraction_of_copy"),
                 "cuda_fraction_of_copy": c.get("fraction_of_copy"), "cuda_variant": c.get("variant"),
                 "same_shapes": r.get("shapes") == c.get("shapes")})
    by_dtype.setdefault(r["dtype"], []).append(ratio)
    pct = lambda x: f"{100 * x:8.1f}%" if isinstance(x, (int, float)) else "       -"
    print(f"{r['op']:24} {r['case']:10} {r['dtype']:5} {r['ms']:10.4f} {c['ms']:10.4f} {ratio:8.3f} "
          f"{pct(r.get('fraction_of_copy'))} {pct(c.get('fraction_of_copy')):>10}"
          + ("" if rows[-1]["same_shapes"] else "  (shapes differ)"))
for t, v in sorted(by_dtype.items()):
    print(f"geometric mean vulkan/cuda {t}: {math.exp(sum(map(math.log, v)) / len(v)):.3f} over {len(v)} timings")
only = sorted({key(r) for r in cu["results"] if "ms" in r} ^ {key(r) for r in vk["results"] if "ms" in r})
if only:
    print("timed on one backend only:", ", ".join("/".join(k) for k in only))
unsupported = [f"{r['op']}/{r.get('dtype', '')}: {r['unsupported']}" for r in cu["results"] if "unsupported" in r]
if unsupported:
    print("unsupported on CUDA:", *unsupported, sep="\n  ")
json.dump({"device": cu.get("device"), "vulkan_device": vk.get("device"), "rows": rows}, open(sys.argv[3], "w"), indent=1)
EOF
  fi
fi

note "summary"
if [ ${#failures[@]} -eq 0 ]; then echo "all CUDA checks passed; results in $out"; exit 0; fi
echo "FAILED: ${failures[*]}; logs in $out"
exit 1
