#!/usr/bin/env bash
# The Vulkan backend's checks that CI cannot make (lavapipe has no cooperative matrices), on a machine with
# a GPU. From the repository root, after a Release build:
#
#   tools/gpu-check-vulkan.sh [BUILD_DIR] [OUT_DIR]     (BUILD_DIR: build/; OUT_DIR: BUILD_DIR/gpu-check-vulkan)
#
# 1. kf-info: the Vulkan device, its cooperative-matrix shapes and the paths chosen (kf-info.txt).
# 2. Conformance of the tensor-core families with each path forced in turn (docs/tuning.md), so that
#    every kernel the device could be given is checked, not only the one chosen by default:
#    - the products (linear, matmul, ffn, the convolutions, linear_cross_entropy and their backward):
#      coopmat=nv, then coopmat=khr at each f16 x f16 -> f32 shape the device lists (coopmat_shape);
#      bf16 both as bf16 on the tensor cores and as rows scaled into f16 (bf16_coopmat=native|scaled)
#      where the build has the knob;
#    - attention and its backward: attn_coopmat=nv, then khr, each in its QUAD form where the device's
#      layouts allow it and in its generic form (attn_quad=1); custom score functions on KHR compiled at
#      run time through the NV form and rewritten (docs/backends.md);
# 3. The thread contract (tests/test_threads: several threads on one context, separate contexts side by
#    side) and the tensor-core test suites (test_coopmat, test_attention_backward, test_spirv_khr).
# Each step writes its log to OUT_DIR; a summary (one line per step, PASS or FAIL) ends the output, and the
# exit status is 1 when a step failed. STEPS (a regular expression over the step names in the summary)
# runs some of them only, e.g. STEPS='^(threads|products-khr)'. KF_VALIDATION=0 turns the validation layer off, also in the
# tests that ask for it: Debian 12's layer predates VK_KHR_cooperative_matrix and reports its structures as errors.
set -uo pipefail
if [ $# -ge 1 ]; then build=$(cd "$1" && pwd) || exit 2; else build=$(cd "$(dirname "$0")/.." && pwd)/build; fi
out=${2:-$build/gpu-check-vulkan}
mkdir -p "$out" && out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
[ -x "$build/tools/kf-conformance" ] || { echo "no $build/tools/kf-conformance: build first (top of $0)"; exit 2; }
unset KF_TUNE KF_BACKEND
export KF_VALIDATION=0
summary=()
step() {  # step NAME KF_TUNE COMMAND...: runs the command with KF_TUNE set, logs it, notes PASS / FAIL
  local name=$1 tune=$2
  shift 2
  [[ "$name" =~ ${STEPS:-.} ]] || return 0
  local log="$out/$name.log"
  local t0=$SECONDS
  KF_TUNE=$tune "$@" > "$log" 2>&1
  local rc=$?
  local tail_line
  tail_line=$(grep -E "passed|failed|PASSED|FAILED" "$log" | tail -1 | cut -c1-120)
  summary+=("$(printf '%-4s %-34s %4ss  %s' "$([ $rc -eq 0 ] && echo PASS || echo FAIL)" "$name" $((SECONDS - t0)) "$tail_line")")
  echo "${summary[-1]}"
}

"$build/tools/kf-info" > "$out/kf-info.txt" 2>&1
"$build/tools/kf-info" --json > "$out/kf-info.json" 2>/dev/null
grep -E "^== vulkan|coopmat|tensor cores" "$out/kf-info.txt"
# The f16 x f16 -> f32 subgroup shapes of the first Vulkan device, as coopmat_shape takes them (MxNxK).
# Also "nv" and "khr" when the device has those extensions.
read -r -d '' paths shapes < <(python3 - "$out/kf-info.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for dev in d.get("devices", []):
    if dev.get("backend") == "vulkan" and dev.get("usable"):
        c = dev["caps"]
        print(",".join(p for p in ("nv", "khr") if c.get("coopmat_" + p)) or "none")
        print(" ".join(s.split()[0] for s in c.get("coopmat_khr_shapes", []) if s.split()[1] == "f16*f16+f32->f32"))
        break
PY
)
has() { [[ ",$paths," == *",$1,"* ]]; }
skip() { summary+=("$(printf '%-4s %-34s        %s' SKIP "$1" "$2")"); echo "${summary[-1]}"; }
conf=("$build/tools/kf-conformance" --backend vulkan --progress none --no-masks)
products='^(linear|matmul|linear_dropout|ffn|ffn_swiglu|conv2d|conv2d_bn_relu|conv2d_gelu_dropout|depthwise_pointwise|linear_cross_entropy|linear_cross_entropy_backward)$'
attention='^attention(_backward)?$'

if has nv; then step products-nv "coopmat=nv,mm_path=2" "${conf[@]}" --filter "$products" --dtypes f16,bf16
else skip products-nv "the device lacks VK_NV_cooperative_matrix"; fi
has khr || skip products-khr "the device lacks VK_KHR_cooperative_matrix"
# (a shape kf has no kernel for, e.g. Mesa's 8x8x16 on Intel, is not a value coopmat_shape takes)
taken=$("$build/tools/kf-info" --options 2>/dev/null | grep -m1 "coopmat_shape" | sed "s/ default .*//" || true)
for s in $shapes; do
  if [[ -n "$taken" && "$taken" != *"$s"* ]]; then skip "products-khr-$s" "kf has no kernel for that shape"; continue; fi
  step "products-khr-$s" "coopmat=khr,coopmat_shape=$s,mm_path=2" "${conf[@]}" --filter "$products" --dtypes f16,bf16
done
if has khr && "$build/tools/kf-info" --options 2>/dev/null | grep -q bf16_coopmat; then
  for m in native scaled; do
    step "products-bf16-$m" "coopmat=khr,bf16_coopmat=$m,mm_path=2" "${conf[@]}" --filter "$products" --dtypes bf16
  done
fi
if has nv; then
  step attention-nv "attn_coopmat=nv" "${conf[@]}" --filter "$attention" --dtypes f16,bf16
  step attention-nv-generic-score-mod "attn_coopmat=nv,attn_path=2,attn_quad=1" "${conf[@]}" --filter '^attention_backward$' --case score_mod --dtypes f16
else skip attention-nv "the device lacks VK_NV_cooperative_matrix"; fi
if has khr; then
  step attention-khr "attn_coopmat=khr" "${conf[@]}" --filter "$attention" --dtypes f16,bf16
  step attention-khr-generic "attn_coopmat=khr,attn_quad=1" "${conf[@]}" --filter "$attention" --dtypes f16,bf16
  step attention-khr-score-mod "attn_coopmat=khr,attn_path=2" "${conf[@]}" --filter "$attention" --case score_mod --dtypes f16
  step attention-khr-generic-score-mod "attn_coopmat=khr,attn_path=2,attn_quad=1" "${conf[@]}" --filter '^attention_backward$' --case score_mod --dtypes f16
else skip attention-khr "the device lacks VK_KHR_cooperative_matrix"; fi
step threads "" "$build/tests/test_threads" --gtest_repeat=5
for t in test_coopmat test_attention_backward test_spirv_khr; do
  [ -x "$build/tests/$t" ] && step "$t" "" "$build/tests/$t"
done

echo
echo "== summary ($(sed -n 's/^== vulkan [0-9]*: //p' "$out/kf-info.txt" | head -1 | sed 's/ ==$//'); logs in $out)"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" > "$out/summary.txt"
! printf '%s\n' "${summary[@]}" | grep -q '^FAIL'
