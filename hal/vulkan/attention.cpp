// The Vulkan kernels of docs/ops.md section 5 (shaders/attention.comp, attention_coopmat.comp,
// attention_decode.comp, attention_bwd.comp): attention_scores, attention and attention_backward.
// attention, decoding (one query row per sequence, not packed; no RoPE, dropout or block mask; the
// device has subgroup shuffles): attention_decode.comp, one workgroup per (sequence, kv head, chunk of
// at most 8 of its query heads, key split), K and V streamed once; its partials go through
// attention.comp's COMBINE pass (sinks, lse). Chosen automatically unless a knob of the flash kernel
// (attn_path, attn_split, attn_rows) is set; KF_TUNE attn_decode=1 never, attn_decode=2 always (an
// Unsupported error naming the reason when the call does not qualify; attn_split=N then sets its
// splits). Its splits: about 512 workgroups in all, each split at least 512 keys. Its reduce-scatter
// form where the key group's lanes are 4 x its heads (variant ",reduce-scatter"; KF_TUNE
// attn_decode_rs=1 never).
// attention, otherwise: the tile (query rows BQ per workgroup, keys BK per shared-memory tile) is chosen from D and
// the device's shared memory; when the grid would be small (decoding: few query rows, long caches) the
// keys are split over workgroups, each writing a partial (m, l, accumulator) to the workspace, and a
// combine pass merges them (KF_TUNE attn_split=1 forces one pass, attn_split=N exactly N splits).
// The small auxiliary inputs (slopes, sinks, key lengths, cu_seqlens, block mask) and the rotary cos/sin
// table are copied into the workspace (the kernels have six bindings), at word offsets passed as push
// constants.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "hal/vulkan/kernels_common.hpp"
#include "plan/attention.hpp"
#include "plan/dropout.hpp"
#include "ops/score_mod.hpp"

namespace kf::hal::vk {
using plan::AttnGeometry;
using plan::attn_geometry;
namespace {

struct AttnPush {
  uint32_t B, Hq, Hkv, SqT, SkT, G;
  uint32_t nsplit, split_len;
  float scale, softcap;
  uint32_t window;
  uint32_t seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
  uint32_t block_size, nkb;
  uint32_t aux_rope, aux_slopes, aux_sinks, aux_lens, aux_cuq, aux_cuk, aux_bmask;
  int32_t rope_pos0;
  uint32_t part_off;
  uint32_t scale_lo, scale_hi;  // the scale as a double (the f64 attention_scores)
  uint32_t aux_amax;            // the tensor-core path in bf16: words + 1 .. + 3, Q's, K's and V's largest magnitudes
  uint32_t group_base;          // added to gl_WorkGroupID.x by the tiled kernels (record_split_x)
};
static_assert(sizeof(AttnPush) <= 128, "push constants: 128 bytes is the guaranteed minimum");

constexpr uint32_t kTpr = 8;  // invocations per query row (attention.comp's TPR)

uint64_t shared_bytes(uint64_t bq, uint64_t bk, uint64_t D) { return 4 * ((bq + bk) * (D + 1) + 2 * bq * bk); }
// attention_coopmat.comp's, with nw subgroups of 16 rows: the staging buffer (max(bk, 32) rows of D / 8 + 1
// packs); generic: the scores (bk + 4 floats a row), the probabilities (bk + 8 halves), row factors;
// QUAD: the V buffer, a 16 x 16 f32 staging tile per subgroup, (m, l) per row.
uint64_t coopmat_attn_shared_bytes(uint64_t bk, uint64_t D, bool quad, uint64_t nw) {
  const uint64_t staging = std::max<uint64_t>(bk, 32) * (D / 8 + 1) * 16, rows = 16 * nw;
  if (quad) return staging + bk * (D / 8 + 1) * 16 + nw * 256 * 4 + rows * 2 * 4;
  return staging + rows * (bk + 4) * 4 + rows * (bk + 8) * 2 + rows * 4;
}

// The workspace of one attention dispatch (forward or backward): 16-byte-aligned regions at word
// offsets (passed as push constants), and the copies that fill the auxiliary ones.
struct WorkspacePlan {
  struct Copy {
    std::shared_ptr<Buffer> src;
    size_t bytes;
    uint32_t at;
  };
  uint64_t words = 0;
  std::vector<Copy> copies;

  uint32_t region(uint64_t n) {
    const uint64_t at = words;
    words += (n + 3) / 4 * 4;
    return static_cast<uint32_t>(at);
  }
  uint32_t copy_of(std::shared_ptr<Buffer> src, size_t bytes) {
    const uint32_t at = region((bytes + 3) / 4);
    copies.push_back({std::move(src), bytes, at});
    return at;
  }
  uint32_t input(const TensorArg& t, size_t elem_bytes) {
    return copy_of(t.buffer, static_cast<size_t>(t.numel) * elem_bytes);
  }
  // Checks the size against the device's largest storage binding, then records the copies into the
  // device's workspace and returns it.
  std::shared_ptr<Buffer> record(VulkanDevice& dev, const std::string& op) const {
    const uint64_t range = dev.info().caps.max_storage_range;
    if (range && words * 4 > range)
      throw Error(ErrorCode::Unsupported, op + ": the workspace of " + std::to_string(words * 4) +
                                              " bytes exceeds the device's largest storage binding");
    std::shared_ptr<Buffer> ws = dev.workspace(static_cast<size_t>(std::max<uint64_t>(words, 4) * 4));
    for (const Copy& c : copies)
      if (c.bytes) dev.record_copy(c.src, ws, c.bytes, 0, size_t(c.at) * 4);
    return ws;
  }
};

// attention_decode.comp's launch: LK lanes per key row, GC query heads per workgroup (nchunk chunks of
// the G heads of a kv head), kDecodeWg invocations.
constexpr uint32_t kDecodeWg = 128;
constexpr uint32_t kDecodeMaxHeads = 8;  // query heads a workgroup holds in registers
struct DecodePlan {
  uint32_t lk = 0, gc = 0, nchunk = 0;
  uint64_t nsplit = 1, split_len = 0;  // key splits
};

// Whether the decode kernel takes the call; `why` names the first reason it does not.
bool decode_plan(const VulkanDevice& dev, const OpCall& call, const AttnGeometry& g, DecodePlan& plan, std::string& why) {
  const Attrs& a = call.attrs;
  const Caps& caps = dev.info().caps;
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const std::string variant = std::string("attn_decode_") + to_string(call.dtype);
  why = kf::plan::decode_refusal(g, a, has(8));
  if (why.empty()) why = kf::plan::decode_head_dim_refusal(g.D, 8);
  if (!why.empty()) return false;
  // RoPE's half form pairs element d with d + D / 2: the kernel reads the partners by whole packs.
  if (a.rope == 1 && (g.D / 2) % pack_elems(call.dtype) != 0)
    why = "it takes RoPE's half form where D / 2 is a multiple of " + std::to_string(pack_elems(call.dtype)) +
          " (D = " + std::to_string(g.D) + ")";
  else if (!dev.has_variant(variant)) why = "this build has no " + variant;
  else if (!caps.subgroup_shuffle) why = "the device has no subgroup shuffles in compute shaders";
  else if (caps.subgroup_size == 0 || (caps.subgroup_size & (caps.subgroup_size - 1)) != 0 || kDecodeWg % caps.subgroup_size != 0)
    why = "the device's subgroup size " + std::to_string(caps.subgroup_size) + " does not divide " + std::to_string(kDecodeWg);
  else if (caps.max_workgroup_size && caps.max_workgroup_size < kDecodeWg)
    why = "the device's workgroups hold fewer than " + std::to_string(kDecodeWg) + " invocations";
  if (!why.empty()) return false;
  const kf::plan::DecodeShape ds = kf::plan::decode_shape(g.D, pack_elems(call.dtype), g.Hq / g.Hkv, kDecodeMaxHeads, caps.subgroup_size);
  plan.nchunk = static_cast<uint32_t>(ds.nchunk);
  plan.gc = static_cast<uint32_t>(ds.heads);
  plan.lk = static_cast<uint32_t>(ds.lanes);
  const uint32_t lk = plan.lk;
  const uint64_t shared = 4ull * (2ull * (kDecodeWg / lk) * plan.gc + uint64_t(plan.gc) * uint64_t(g.D));
  if (caps.max_shared_bytes && shared > caps.max_shared_bytes) {
    why = "its " + std::to_string(shared) + " bytes of shared memory exceed the device's " + std::to_string(caps.max_shared_bytes);
    return false;
  }
  // Key splits: about 512 workgroups in all (4 per SM of an H100), each split at least 128 keys long (a
  // short cache, 4k keys of 8 kv heads, then still fills the device: 256 workgroups, not 64).
  // (2048 measured worse: the partials and the combine pass grow with the splits; H100, B 1, H 32,
  // 32k keys, f16: 16 splits 0.98 of copy, 32 0.95, 64 0.84, 128 0.72, 256 0.55.)
  const uint64_t Sk = static_cast<uint64_t>(g.SkT);
  const uint64_t base = static_cast<uint64_t>(g.B) * static_cast<uint64_t>(g.Hkv) * plan.nchunk;
  uint64_t nsplit = dev.tuning().attn_split;
  if (nsplit == 0) nsplit = std::min<uint64_t>({(512 + base - 1) / base, std::max<uint64_t>(Sk / 128, 1), 256});
  nsplit = std::clamp<uint64_t>(nsplit, 1, std::max<uint64_t>(Sk, 1));
  plan.nsplit = nsplit;
  plan.split_len = std::max<uint64_t>((Sk + nsplit - 1) / nsplit, 1);
  const uint64_t gy = static_cast<uint64_t>(g.Hkv) * plan.nchunk, gz = static_cast<uint64_t>(g.B) * nsplit;
  if (gy > 65535 || gz > 65535) {
    why = "its grid 1 x " + std::to_string(gy) + " x " + std::to_string(gz) + " exceeds 65535 workgroups in a dimension";
    return false;
  }
  return true;
}

std::string kind_of(OpId id) {
  switch (id) {
    case OpId::attention_scores: return "attn_scores";
    case OpId::attention: return "attn";
    case OpId::attention_backward: return "attn_bwd_dkv";
    default: return "";
  }
}

// The geometry of a forward call (attention, attention_scores) from its inputs' shapes.
AttnGeometry forward_geometry(const OpCall& call) {
  std::vector<Shape> shapes;
  for (const auto& t : call.inputs) shapes.push_back(t.buffer ? t.shape : Shape{});
  return attn_geometry(shapes);
}

// The geometry of attention_backward from its inputs' shapes (q, k, v, then the optional inputs from 6).
AttnGeometry backward_geometry(const OpCall& call) {
  std::vector<Shape> fs = {call.inputs[0].shape, call.inputs[1].shape, call.inputs[2].shape};
  for (size_t k = 6; k < call.inputs.size(); ++k)
    fs.push_back(call.inputs[k].buffer != nullptr ? call.inputs[k].shape : Shape{});
  return attn_geometry(fs);
}

// attention_bwd.comp's push constants.
struct BwdPush {
  uint32_t B, Hq, Hkv, SqT, SkT, G;
  float scale, softcap;
  uint32_t window;
  uint32_t seed_lo, seed_hi, off_lo, off_hi, thr;
  float keep_scale;
  uint32_t block_size, nkb;
  uint32_t aux_rope, aux_slopes, aux_lens, aux_cuq, aux_cuk, aux_bmask;
  int32_t rope_pos0;
  uint32_t ws_D, ws_lse, ws_do;
  uint32_t aux_amax;  // the tensor-core passes in bf16: words + 1 .. + 4, the largest magnitudes of q, k, v, do
  uint32_t group_base;  // added to gl_WorkGroupID.x by the tiled passes (record_split_x)
};
static_assert(sizeof(BwdPush) <= 128, "push constants: 128 bytes is the guaranteed minimum");

// Shared memory of attention_bwd.comp's DKV and DQ passes for a tile.
uint64_t bwd_shared_bytes(uint64_t bq, uint64_t bk, uint64_t D) {
  return 4 * (2 * (bq + bk) * (D + 1) + 2 * bq * bk + 2 * bq);
}

// The rotary cos/sin table for positions [pmin, pmin + npos): pairs (cos, sin) of pos * base^(-2d/D)
// for d < D / 2, computed in double and rounded once to float.
std::vector<float> rope_values(int64_t D, double base, int64_t pmin, int64_t npos) {
  const int64_t half = D / 2;
  std::vector<float> t(static_cast<size_t>(npos * half * 2));
  for (int64_t p = 0; p < npos; ++p)
    for (int64_t d = 0; d < half; ++d) {
      const double theta = double(p + pmin) * std::pow(base, -2.0 * double(d) / double(D));
      t[size_t((p * half + d) * 2)] = static_cast<float>(std::cos(theta));
      t[size_t((p * half + d) * 2 + 1)] = static_cast<float>(std::sin(theta));
    }
  return t;
}

// bf16 on the tensor-core paths (attention_coopmat.comp and attention_bwd_coopmat.comp BF16IN): the largest
// magnitude of each tensor t[i] (q, k, v, and do for the backward) into word amax + 1 + i of the workspace
// (attention_absmax.comp; words amax .. amax + t.size() are cleared first), then each tensor with a slot
// (slot[i] > 0) converted to f16 times its power of two into that workspace slot. Returns the tensors to
// read: the converted copies, the inputs themselves elsewhere. One absmax dispatch for q, k and v (rows y
// = 0, 1, 2), one for do; one conversion for k and v together where both are converted, one for q, one
// for do.
std::vector<std::shared_ptr<Buffer>> stage_bf16_as_f16(VulkanDevice& dev, const std::shared_ptr<Buffer>& ws, uint32_t amax,
                                                       const std::vector<const TensorArg*>& t, const std::vector<int>& slot,
                                                       const std::string& op) {
  struct {
    uint32_t n_packs[3], out_word;
  } ap{};
  const size_t nt = t.size();
  std::vector<uint32_t> n(nt);
  for (size_t k = 0; k < nt; ++k) {
    const uint64_t packs = static_cast<uint64_t>(t[k]->numel) / 8;  // (D is a multiple of 16)
    if (packs > UINT32_MAX) throw Error(ErrorCode::Unsupported, op + ": bf16 inputs of more than 2^32 16-byte packs");
    n[k] = static_cast<uint32_t>(packs);
  }
  // Enough workgroups to stream at the copy bandwidth, each taking at least 4 packs per invocation.
  const auto groups = [](uint64_t packs) { return static_cast<uint32_t>(std::clamp<uint64_t>((packs + 1023) / 1024, 1, 1024)); };
  dev.record_fill(ws, 0u, 4 * (nt + 1), size_t(amax) * 4);
  Launch al;  // q, k, v (rows y = 0, 1, 2), then do alone
  al.variant = "attn_absmax_bf16";
  al.bindings[0] = t[0]->buffer;
  al.bindings[1] = t[1]->buffer;
  al.bindings[2] = t[2]->buffer;
  al.bindings[5] = ws;
  ap = {{n[0], n[1], n[2]}, amax + 1};
  al.push = &ap;
  al.push_bytes = sizeof(ap);
  al.groups = groups(std::max({n[0], n[1], n[2]}));
  al.groups_y = 3;
  dev.record(al);
  if (nt > 3) {
    al.bindings[0] = t[3]->buffer;
    ap = {{n[3], 0, 0}, amax + 4};
    al.groups = groups(n[3]);
    al.groups_y = 1;
    dev.record(al);
  }
  std::vector<std::shared_ptr<Buffer>> out(nt);
  for (size_t k = 0; k < nt; ++k)
    out[k] = slot[k] > 0 ? dev.workspace(static_cast<size_t>(t[k]->numel) * 2, slot[k]) : t[k]->buffer;
  // CONVERT reads bindings 1 (y = 0) and 2 (y = 1) with the scales of words out_word + 1 + y.
  Launch cv = al;
  cv.variant = "attn_to_f16_bf16";
  if (slot[1] > 0 && slot[2] > 0) {
    cv.bindings[1] = t[1]->buffer;
    cv.bindings[2] = t[2]->buffer;
    cv.bindings[3] = out[1];
    cv.bindings[4] = out[2];
    ap = {{0, n[1], n[2]}, amax + 1};
    cv.groups = groups(std::max(n[1], n[2]));
    cv.groups_y = 2;
    dev.record(cv);
  }
  for (size_t k = 0; k < nt; ++k) {  // the others one at a time as y = 0 (word amax + k + 1)
    if (slot[k] <= 0 || ((k == 1 || k == 2) && slot[1] > 0 && slot[2] > 0)) continue;
    cv.bindings[1] = t[k]->buffer;
    cv.bindings[2] = t[k]->buffer;  // (unread with y = 0 only)
    cv.bindings[3] = out[k];
    cv.bindings[4] = out[k];
    ap = {{0, n[k], 0}, amax + static_cast<uint32_t>(k)};
    cv.groups = groups(n[k]);
    cv.groups_y = 1;
    dev.record(cv);
  }
  return out;
}

// The variant `base` with the call's custom score function spliced in (SCORE_MOD; SCORE_MOD_GRAD, its
// derivative, too for the backward passes), compiled at run time once per function text and variant;
// `base` itself when there is none. Keyed by the text as given, so that a repeated call (each decode
// step) neither parses it nor prints its GLSL again. Called before anything is recorded, so that a
// failure writes nothing.
std::string score_mod_variant(VulkanDevice& dev, const std::string& base, const Attrs& a, const std::string& op, bool grad) {
  if (a.score_mod.empty()) return base;
  return dev.runtime_variant(base, "score_mod:" + a.score_mod, op + " with a custom score function (score_mod)", [&] {
    const ScoreMod fn = ScoreMod::parse(op, a.score_mod);
    Defines defs = {{"SCORE_MOD", fn.glsl()}};
    if (grad) defs.emplace_back("SCORE_MOD_GRAD", fn.glsl_grad());
    return defs;
  });
}

// Whether bf16 inputs staged as f16 (stage_bf16_as_f16) fit its 32-bit pack counts.
bool stageable(const OpCall& call, std::initializer_list<size_t> inputs, std::string& why) {
  for (size_t k : inputs)
    if (static_cast<uint64_t>(call.inputs[k].numel) / 8 > UINT32_MAX) {
      why = "bf16 inputs of more than 2^32 16-byte packs";
      return false;
    }
  return true;
}

// The backward's tiles and path: from the call and the device alone, so that supports_attention refuses
// (saying why) what dispatch_backward would not run, before anything is recorded.
struct BwdPlan {
  uint32_t bq = 0, bk = 0;
  std::string cm_dkv, cm_dq, cmq_dkv, cmq_dq;  // the tensor-core passes' variants
  bool cm_path = false, cm_quad = false, staged = false;
  uint64_t ktiles = 0, qtiles = 0;
};
bool plan_backward(VulkanDevice& dev, const OpCall& call, const AttnGeometry& g, BwdPlan& p, std::string& why) {
  const Attrs& a = call.attrs;
  const Caps& caps = dev.info().caps;
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const uint64_t D = static_cast<uint64_t>(g.D);
  // The tile: the largest that fits the shared memory and the workgroup size.
  const uint64_t max_shared = caps.max_shared_bytes ? caps.max_shared_bytes : 16384;
  const uint64_t max_wg = caps.max_workgroup_size ? caps.max_workgroup_size : 128;
  uint32_t bq = 0, bk = 0;
  for (const auto& [q, k] : {std::pair<uint32_t, uint32_t>{16, 16}, {8, 16}, {16, 8}, {8, 8}})
    if (bwd_shared_bytes(q, k, D) <= max_shared && q * kTpr <= max_wg && k * kTpr <= max_wg) {
      bq = q, bk = k;
      break;
    }
  if (bq == 0) {
    why = "head dimension " + std::to_string(D) + " needs " + std::to_string(bwd_shared_bytes(8, 8, D)) +
          " bytes of shared memory; " + dev.info().name + " offers " + std::to_string(max_shared);
    return false;
  }

  // The tensor-core passes (attention_bwd_coopmat.comp) where they apply: f16 and bf16 (in both forms: f16
  // copies of q, k, v and do times powers of two, stage_bf16_as_f16, where the build has that staging), D
  // 64 or 128 (32, 80 and 96 too in the QUAD form), the NV 16x16x16 f16 shape, causal / window masks, key
  // lengths, GQA and custom score functions (and dropout, soft-capping and ALiBi in the QUAD form); not
  // RoPE, block masks or packed sequences. KF_TUNE attn_path=1 keeps the portable passes, attn_path=2
  // forces these (Unsupported, saying why, where they do not apply). Decided before anything is recorded,
  // so that a refusal leaves nothing behind.
  // The QUAD form (P and dS on the accumulators; 64 keys / 64 rows a workgroup of 4 subgroups, 21888 bytes
  // of shared memory at most) where the device's accumulator layout was found; KF_TUNE attn_quad=1 keeps
  // the generic form (32 x 32 tiles, 2 subgroups, 48512 bytes).
  // KF_TUNE attn_coopmat / VulkanDevice::coopmat_attn: NV or KHR, both forms (KHR's QUAD form where the
  // device's A operands share the accumulators' layout: coopmat_quad_layout); bf16 staged as f16 on both.
  const bool bf16 = call.dtype == DType::bf16;
  const bool khr = dev.coopmat_attn().path == CoopmatPath::khr;
  const std::string cm_base = khr ? "attn_bwd_cm_khr_" : "attn_bwd_cm_";
  const std::string cm_dkv = cm_base + "dkv_d" + std::to_string(D) + (bf16 ? "_bf16" : ""),
                    cm_dq = cm_base + "dq_d" + std::to_string(D) + (bf16 ? "_bf16" : "");
  const bool staging = dev.has_variant("attn_absmax_bf16") && dev.has_variant("attn_to_f16_bf16");
  // bf16 as bf16 in the KHR QUAD form where the products take it natively (as the forward: no staging
  // passes; not with a custom score function, the run-time compiler having no bf16 types).
  const bool bf16n_possible = khr && bf16 && dev.coopmat_bf16().native && a.score_mod.empty() &&
                              dev.has_variant("attn_bwd_cmq_khr_dkv_d" + std::to_string(D) + "_bf16n") &&
                              dev.has_variant("attn_bwd_cmq_khr_dq_d" + std::to_string(D) + "_bf16n");
  const std::string cmq_base = khr ? "attn_bwd_cmq_khr_" : "attn_bwd_cmq_";
  const std::string cmq_dt = bf16 ? (bf16n_possible ? "_bf16n" : "_bf16") : "";
  const std::string cmq_dkv = cmq_base + "dkv_d" + std::to_string(D) + cmq_dt, cmq_dq = cmq_base + "dq_d" + std::to_string(D) + cmq_dt;
  const bool nv = dev.coopmat_f16() && dev.coopmat_attn().path == CoopmatPath::nv;
  const bool quad = (call.dtype == DType::f16 || bf16) && D % 16 == 0 && D <= 128 && (nv || khr) &&
                    dev.tuning().attn_quad == 0 && dev.has_variant(cmq_dkv) && dev.has_variant(cmq_dq) &&
                    max_shared >= 21888 && max_wg >= 128 && coopmat_quad_layout(dev, khr) >= 0;
  // Why the QUAD form is not there, for the refusals of what only it takes.
  const std::string quad_needs =
      std::string(khr ? "needs the device's accumulators and A operands in the quad layout"
                      : "needs the device's accumulator layout") +
      (dev.tuning().attn_quad ? " and was turned off (KF_TUNE attn_quad=1)" : "");
  std::string no_cm;
  if (call.dtype != DType::f16 && !bf16) no_cm = "it takes f16 and bf16 only";
  else if (D != 32 && D != 64 && D != 80 && D != 96 && D != 128)
    no_cm = "it takes head dimensions 32, 64, 80, 96 and 128 (D = " + std::to_string(D) + ")";
  else if (!nv && !khr) no_cm = "the device has no tensor cores for it (" + dev.coopmat_attn().why + ")";
  else if (a.rope) no_cm = "it does not apply RoPE";
  else if (has(11)) no_cm = "it does not take a block mask";
  else if (g.varlen) no_cm = "it does not take packed sequences";
  else if (bf16 && !staging) no_cm = "this build has no bf16 staging for it (attn_absmax_bf16, attn_to_f16_bf16)";
  else if (!quad && D != 64 && D != 128)
    no_cm = "its generic form takes head dimensions 64 and 128 (its QUAD form, which takes " + std::to_string(D) + ", " +
            quad_needs + ")";
  else if (!quad && (a.p > 0 || a.softcap > 0 || a.alibi || has(6)))
    no_cm = "its generic form does not apply dropout, soft-capping or ALiBi (its QUAD form, which does, " + quad_needs + ")";
  else if (!quad && (!dev.has_variant(cm_dkv) || !dev.has_variant(cm_dq)))
    no_cm = "this build has no " + (dev.has_variant(cm_dkv) ? cm_dq : cm_dkv);
  else if (!quad && (max_shared < 48512 || max_wg < 64)) no_cm = "it needs 48512 bytes of shared memory and 64 invocations";
  else if (g.nseq > 65535 || g.Hkv > 65535)
    no_cm = "its grid exceeds 65535 workgroups in y (kv heads) or z (sequences)";
  if (dev.tuning().attn_path == 2 && !no_cm.empty()) {
    why = "the cooperative-matrix path was forced (KF_TUNE attn_path=2) but " + no_cm;
    return false;
  }
  const bool cm_path = no_cm.empty() && dev.tuning().attn_path != 1;
  const bool cm_quad = cm_path && quad, staged = cm_path && bf16 && !(cm_quad && bf16n_possible);
  if (staged && !stageable(call, {0, 1, 2, 4}, why)) return false;
  const uint64_t G = static_cast<uint64_t>(g.Hq / g.Hkv), tile_k = cm_quad ? 64 : cm_path ? 32 : bk,
                 tile_q = cm_quad ? 64 : cm_path ? 32 : bq;
  const uint64_t ktiles = (static_cast<uint64_t>(g.SkT) + tile_k - 1) / tile_k;
  const uint64_t qtiles = (G * static_cast<uint64_t>(g.SqT) + tile_q - 1) / tile_q;
  // The key and query tiles (x) are split over several dispatches where they exceed the device's limit.
  if (g.nseq > 65535 || g.Hkv > 65535) {
    why = "the grid exceeds 65535 workgroups in y (kv heads) or z (sequences)";
    return false;
  }
  p = {bq, bk, cm_dkv, cm_dq, cmq_dkv, cmq_dq, cm_path, cm_quad, staged, ktiles, qtiles};
  return true;
}

// attention_backward: PRE (D, lse, do into the workspace), DKV, DQ.
Variant dispatch_backward(VulkanDevice& dev, const OpCall& call) {
  const Attrs& a = call.attrs;
  const Caps& caps = dev.info().caps;
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const AttnGeometry g = backward_geometry(call);
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  const uint64_t D = static_cast<uint64_t>(g.D), rows = static_cast<uint64_t>(g.B * g.Hq * g.SqT);
  const size_t es = dtype_size(call.dtype);
  BwdPush pc{};
  pc.B = u32(g.B);
  pc.Hq = u32(g.Hq);
  pc.Hkv = u32(g.Hkv);
  pc.SqT = u32(g.SqT);
  pc.SkT = u32(g.SkT);
  pc.G = u32(g.Hq / g.Hkv);
  pc.scale = static_cast<float>(a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(g.D)));
  pc.softcap = static_cast<float>(a.softcap);
  pc.window = u32(a.window);
  set_dropout(pc, a);

  BwdPlan bp;
  std::string no;
  if (!plan_backward(dev, call, g, bp, no))  // refused by supports_attention
    throw Error(ErrorCode::Unsupported, "attention_backward: " + no);
  const uint32_t bq = bp.bq, bk = bp.bk;
  const std::string &cm_dkv = bp.cm_dkv, &cm_dq = bp.cm_dq, &cmq_dkv = bp.cmq_dkv, &cmq_dq = bp.cmq_dq;
  const bool cm_path = bp.cm_path, cm_quad = bp.cm_quad, staged = bp.staged;
  const uint64_t ktiles = bp.ktiles, qtiles = bp.qtiles;
  // The DKV and DQ passes (with the custom score function, if any, and its derivative).
  const std::string dt = to_string(call.dtype);
  const bool custom = !a.score_mod.empty();
  const std::string dkv_variant =
      score_mod_variant(dev, cm_quad ? cmq_dkv : cm_path ? cm_dkv : "attn_bwd_dkv_" + dt, a, "attention_backward", true);
  const std::string dq_variant =
      score_mod_variant(dev, cm_quad ? cmq_dq : cm_path ? cm_dq : "attn_bwd_dq_" + dt, a, "attention_backward", true);
  WorkspacePlan plan;
  if (a.rope) {
    const auto [pmin, npos] = plan::rope_positions(g);  // shared with CUDA (src/plan)
    int64_t first = 0;
    const auto table = rope_table(dev, g.D, a.rope_base, pmin, npos, &first);
    pc.aux_rope = plan.copy_of(table, static_cast<size_t>((pmin - first + npos) * g.D) * 4);
    pc.rope_pos0 = static_cast<int32_t>(-first);
  }
  if (has(6)) pc.aux_slopes = plan.input(call.inputs[6], es);
  if (has(7)) pc.aux_lens = plan.input(call.inputs[7], 4);
  if (has(8)) pc.aux_cuq = plan.input(call.inputs[8], 4);
  if (has(9)) pc.aux_cuk = plan.input(call.inputs[9], 4);
  if (has(11)) {
    pc.aux_bmask = plan.input(call.inputs[11], 4);
    pc.block_size = u32(a.block_size);
    pc.nkb = u32(call.inputs[11].shape[1]);
  }
  pc.ws_D = plan.region(rows);
  pc.ws_lse = plan.region(rows);
  if (!cm_path) pc.ws_do = plan.region(rows * D);  // the tensor-core passes read do itself (binding 6)
  if (staged) pc.aux_amax = plan.region(5);
  const std::shared_ptr<Buffer> ws = plan.record(dev, "attention_backward");
  // bf16 on the tensor cores: f16 copies of q, k, v and do times powers of two (attention_absmax.comp).
  std::vector<std::shared_ptr<Buffer>> qkvd = {call.inputs[0].buffer, call.inputs[1].buffer, call.inputs[2].buffer,
                                               call.inputs[4].buffer};
  if (staged)
    qkvd = stage_bf16_as_f16(dev, ws, pc.aux_amax, {&call.inputs[0], &call.inputs[1], &call.inputs[2], &call.inputs[4]}, {1, 2, 3, 4},
                             "attention_backward");

  const bool alibi = a.alibi || has(6);
  const std::vector<uint32_t> spec = {0u,
                                      u32(g.D),
                                      bq,
                                      bk,
                                      a.causal ? 1u : 0u,
                                      a.window > 0 ? 1u : 0u,
                                      alibi ? (has(6) ? 2u : 1u) : 0u,
                                      a.softcap > 0 ? 1u : 0u,
                                      u32(a.rope),
                                      has(7) ? 1u : 0u,
                                      g.varlen ? 1u : 0u,
                                      has(11) ? 1u : 0u,
                                      a.p > 0 ? 1u : 0u};
  Launch pre;
  pre.variant = "attn_bwd_pre_" + dt;
  pre.spec = spec;
  pre.spec.push_back(cm_path ? 0u : 1u);  // DO_TO_WS
  pre.spec[0] = kWorkgroup;
  pre.bindings[0] = call.inputs[3].buffer;
  pre.bindings[1] = call.inputs[4].buffer;
  pre.bindings[2] = call.inputs[5].buffer;
  pre.bindings[5] = ws;
  pre.push = &pc;
  pre.push_bytes = sizeof(pc);
  pre.groups = grid(rows, kWorkgroup, caps, dev.tuning());
  dev.record(pre);

  // dK / dV, then dQ: the tensor-core passes (bindings 6: do) or the portable ones (tile width a spec constant).
  Launch dkv;
  dkv.variant = dkv_variant;
  dkv.spec = spec;
  if (!cm_path) dkv.spec[0] = bk * kTpr;
  if (cm_quad) {  // QLAYOUT is specialization constant 16
    dkv.spec.resize(16, 0u);
    dkv.spec.push_back(static_cast<uint32_t>(coopmat_quad_layout(dev, dev.coopmat_attn().path == CoopmatPath::khr)));
  }
  dkv.bindings[0] = cm_path ? qkvd[0] : call.inputs[0].buffer;
  dkv.bindings[1] = cm_path ? qkvd[1] : call.inputs[1].buffer;
  dkv.bindings[2] = cm_path ? qkvd[2] : call.inputs[2].buffer;
  dkv.bindings[3] = call.outputs[1].buffer;
  dkv.bindings[4] = call.outputs[2].buffer;
  dkv.bindings[5] = ws;
  if (cm_path) dkv.bindings[6] = qkvd[3];
  dkv.push = &pc;
  dkv.push_bytes = sizeof(pc);
  dkv.groups_y = u32(g.Hkv);
  dkv.groups_z = u32(g.nseq);
  record_split_x(dev, dkv, ktiles, pc.group_base);

  Launch dq = dkv;
  dq.variant = dq_variant;
  if (!cm_path) dq.spec[0] = bq * kTpr;
  dq.bindings[3] = call.outputs[0].buffer;
  dq.bindings[4] = nullptr;
  record_split_x(dev, dq, qtiles, pc.group_base);
  const std::string fn = custom ? ",score_mod" : "";
  if (cm_quad)
    return "vulkan:attention_backward/" + dev.coopmat_attn().label() + "-quad" +
           std::string(staged ? ",bf16-staged-as-f16" : call.dtype == DType::bf16 ? ",bf16-native" : "") + fn + ",bq=64,bk=64";
  if (cm_path)
    return "vulkan:attention_backward/" + dev.coopmat_attn().label() + std::string(staged ? ",bf16-staged-as-f16" : "") + fn +
           ",bq=32,bk=32";
  return "vulkan:attention_backward/portable" + fn + ",bq=" + std::to_string(bq) + ",bk=" + std::to_string(bk);
}

// attention.comp's COMBINE pass: merges the key splits' partials (m, l, accumulator) from the workspace
// into o (and lse), after the flash or the decode kernel wrote them.
void record_combine(VulkanDevice& dev, const OpCall& call, const std::vector<uint32_t>& spec,
                    const std::shared_ptr<Buffer>& ws, const AttnPush& pc, uint64_t rows) {
  Launch c;
  c.variant = std::string("attn_combine_") + to_string(call.dtype);
  c.spec = spec;
  c.spec[0] = kWorkgroup;
  c.bindings[0] = ws;
  c.bindings[3] = call.outputs[0].buffer;
  if (call.outputs.size() > 1) c.bindings[4] = call.outputs[1].buffer;
  c.push = &pc;
  c.push_bytes = sizeof(pc);
  c.groups = grid(rows, 1, dev.info().caps, dev.tuning());  // a workgroup a row (attention.comp COMBINE)
  dev.record(c);
}

// The decode kernel: one workgroup per (sequence, kv head, chunk of query heads, key split), its
// partials merged by attention.comp's COMBINE pass (which adds the sinks and writes lse).
Variant dispatch_decode(VulkanDevice& dev, const OpCall& call, const AttnGeometry& g, const DecodePlan& dp, AttnPush& pc) {
  const Attrs& a = call.attrs;
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };
  const size_t es = dtype_size(call.dtype);
  const uint64_t D = static_cast<uint64_t>(g.D);
  const uint64_t rows = static_cast<uint64_t>(g.B * g.Hq);

  const uint64_t nsplit = dp.nsplit, split_len = dp.split_len;
  const uint64_t gy = static_cast<uint64_t>(g.Hkv) * dp.nchunk, gz = static_cast<uint64_t>(g.B) * nsplit;  // at most 65535: decode_plan
  pc.nsplit = static_cast<uint32_t>(nsplit);
  pc.split_len = static_cast<uint32_t>(split_len);

  const std::string variant = score_mod_variant(dev, std::string("attn_decode_") + to_string(call.dtype), a, "attention", false);
  WorkspacePlan plan;
  std::shared_ptr<Buffer> rope;  // bound as cached (binding 3), not copied into the workspace
  if (a.rope) {
    const auto [pmin, npos] = plan::rope_positions(g);
    int64_t first = 0;
    rope = rope_table(dev, g.D, a.rope_base, pmin, npos, &first);
    pc.rope_pos0 = static_cast<int32_t>(-first);
  }
  if (has(3)) pc.aux_slopes = plan.input(call.inputs[3], es);
  if (has(4)) pc.aux_lens = plan.input(call.inputs[4], 4);
  if (has(7)) pc.aux_sinks = plan.input(call.inputs[7], es);
  pc.part_off = plan.region(nsplit * rows * (D + 2));
  const std::shared_ptr<Buffer> ws = plan.record(dev, "attention");
  pc.softcap = static_cast<float>(a.softcap);
  pc.window = u32(a.window);

  const bool lse = call.outputs.size() > 1;
  const bool alibi = a.alibi || has(3);
  const std::vector<uint32_t> spec = {kDecodeWg,
                                      u32(g.D),
                                      1u,
                                      1u,
                                      a.causal ? 1u : 0u,
                                      a.window > 0 ? 1u : 0u,
                                      alibi ? (has(3) ? 2u : 1u) : 0u,
                                      a.softcap > 0 ? 1u : 0u,
                                      0u,
                                      has(4) ? 1u : 0u,
                                      0u,
                                      has(7) ? 1u : 0u,
                                      0u,
                                      0u,
                                      lse ? 1u : 0u,
                                      1u};
  // The reduce-scatter form (attention_decode.comp's RS) where the key group's lanes are as many as its
  // scores (lk = 4 gc) unless KF_TUNE attn_decode_rs=1.
  const bool rs = dev.tuning().attn_decode_rs != 1 && dp.lk == 4 * dp.gc;
  Launch l;
  l.variant = variant;
  l.spec = spec;
  l.spec[8] = static_cast<uint32_t>(a.rope);  // ROPE (the combine pass below never rotates)
  l.spec.push_back(dp.lk);
  l.spec.push_back(dp.gc);
  l.spec.push_back(rs ? 1u : 0u);
  l.bindings[0] = call.inputs[0].buffer;
  l.bindings[1] = call.inputs[1].buffer;
  l.bindings[2] = call.inputs[2].buffer;
  if (rope) l.bindings[3] = rope;
  l.bindings[4] = ws;
  l.bindings[5] = ws;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = 1;
  l.groups_y = static_cast<uint32_t>(gy);
  l.groups_z = static_cast<uint32_t>(gz);
  dev.record(l);

  record_combine(dev, call, spec, ws, pc, rows);
  return "vulkan:attention/decode" + std::string(a.score_mod.empty() ? "" : ",score_mod") +
         (a.rope ? ",rope" : "") + ",lk=" + std::to_string(dp.lk) +
         ",heads=" + std::to_string(dp.gc) +
         (dp.nchunk > 1 ? "x" + std::to_string(dp.nchunk) : std::string()) + ",split=" + std::to_string(nsplit) + "x" +
         std::to_string(split_len) + (rs ? ",reduce-scatter" : "");
}

// Whether attention runs on the decode kernel (attention_decode.comp): automatically when the call
// qualifies and no knob of the flash kernel (attn_path, attn_split, attn_rows) is set; KF_TUNE
// attn_decode=1 never, 2 always (a forced decode kernel that does not take the call is refused by
// supports_attention).
bool takes_decode(const VulkanDevice& dev, const OpCall& call, const AttnGeometry& g, DecodePlan& dp) {
  const Tuning& tune = dev.tuning();
  if (tune.attn_decode == 1) return false;
  std::string why;
  const bool ok = decode_plan(dev, call, g, dp, why);
  const bool flash_knobs = tune.attn_path != 0 || tune.attn_split != 0 || tune.attn_rows != 0;
  return ok && (tune.attn_decode == 2 || !flash_knobs);
}

// The flash kernel's tile, path and key splits: from the call and the device alone, so that
// supports_attention refuses (saying why) what dispatch_attention would not run.
struct FlashPlan {
  uint32_t bq = 0, bk = 0, nw = 4;  // query rows and keys per tile; subgroups of the tensor-core path
  bool cm = false, cm_quad = false;
  bool bf16n = false;  // bf16 as bf16 on the tensor cores (no staging as f16)
  std::string cm_variant, quad_variant, quad_base;
  uint64_t nsplit = 1, split_len = 0, qtiles = 0;
};
bool plan_flash(VulkanDevice& dev, const OpCall& call, const AttnGeometry& g, FlashPlan& p, std::string& why) {
  const Caps& caps = dev.info().caps;
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const uint64_t D = static_cast<uint64_t>(g.D);
  // The tile: query rows per workgroup (8, 16 or 32, no more than the rows there are, at most KF_TUNE's
  // attn_rows) and keys per tile, the largest that fit the device's shared memory and workgroup size.
  const uint64_t rows_needed = static_cast<uint64_t>(g.Hq / g.Hkv) * static_cast<uint64_t>(g.SqT);
  const uint64_t max_shared = caps.max_shared_bytes ? caps.max_shared_bytes : 16384;
  const uint64_t max_wg = caps.max_workgroup_size ? caps.max_workgroup_size : 128;
  uint32_t bq = 0, bk = 0;
  // The tensor-core path (attention_coopmat.comp, f16 and bf16 staged as scaled f16): 64 query rows
  // per workgroup of 4 subgroups, chosen when there are at least 32 rows to fill a tile (decoding stays
  // on the portable kernel).
  const bool cm_dtype = call.dtype == DType::f16 || call.dtype == DType::bf16;
  const std::string cm_dt = to_string(call.dtype);
  // NV (dev.coopmat_f16) or KHR (the generic form at 16x16x16; with a custom score function compiled at
  // run time in an NV form and rewritten, runtime_shader.hpp): VulkanDevice::coopmat_attn.
  const CoopmatChoice& ac = dev.coopmat_attn();
  const bool khr = ac.path == CoopmatPath::khr;
  const std::string cm_variant = (khr ? "attn_cm_khr_" : "attn_cm_") + cm_dt + "_d" + std::to_string(D);
  const uint32_t cm_bk = D > 128 ? 32 : 64;
  const bool cm_on = khr || (ac.path == CoopmatPath::nv && dev.coopmat_f16());
  const bool cm_fits = cm_on && cm_dtype && dev.has_variant(cm_variant) &&
                       (call.dtype != DType::bf16 || (dev.has_variant("attn_absmax_bf16") && dev.has_variant("attn_to_f16_bf16"))) &&
                       coopmat_attn_shared_bytes(cm_bk, D, false, 4) <= max_shared && max_wg >= 128;
  if (dev.tuning().attn_path == 2 && !cm_fits) {
    why = "the cooperative-matrix path was forced (KF_TUNE attn_path=2) but " +
          std::string(!cm_dtype ? "it takes f16 and bf16 only"
                      : !cm_on ? "the device has no tensor cores for it (" + ac.why + ")"
                      : !dev.has_variant(cm_variant) ? "it is not built for head dimension " + std::to_string(D)
                                                     : "it does not fit the device's shared memory");
    return false;
  }
  const bool cm = cm_fits && (dev.tuning().attn_path == 2 || (dev.tuning().attn_path == 0 && rows_needed >= 32));
  if (cm && call.dtype == DType::bf16 && !stageable(call, {0, 1, 2}, why)) return false;
  // The QUAD form on NV, and on KHR where the device's A operands share the accumulators' layout.
  const std::string quad_base = (khr ? "attn_cmq_khr_" : "attn_cmq_") + cm_dt + "_d" + std::to_string(D);
  bool cm_quad = cm && dev.tuning().attn_quad == 0 && dev.has_variant(quad_base) &&
                 coopmat_attn_shared_bytes(cm_bk, D, true, 4) <= max_shared && coopmat_quad_layout(dev, khr) >= 0;
  // bf16 as bf16 where the products take it natively (VulkanDevice::coopmat_bf16: the device's bf16
  // 16x16x16 shape, its features on): the KHR QUAD form on bf16 matrices, without the staging passes
  // (KF_TUNE bf16_coopmat=scaled keeps them). Not with a custom score function: the run-time compiler has
  // no bf16 types.
  const std::string bf16n_base = "attn_cmq_khr_bf16n_d" + std::to_string(D);
  const bool bf16n = cm_quad && khr && call.dtype == DType::bf16 && dev.coopmat_bf16().native &&
                     call.attrs.score_mod.empty() && dev.has_variant(bf16n_base);
  // The QUAD workgroup: 4 or 8 subgroups, K / V prefetched into registers or not (never with a block
  // mask, whose skipped tiles the prefetch does not follow).
  std::string quad_variant = bf16n ? bf16n_base : quad_base;
  uint32_t nw = 4;
  if (cm_quad) {
    // Default: 8 subgroups (H100: 160 TFLOP/s against 116 with 4, the K / V staging shared by twice the
    // rows); the prefetch adds 1-2 % at 254 registers, too close to spilling to be the default.
    const uint32_t want = dev.tuning().attn_cm ? dev.tuning().attn_cm : 2;
    const char* suffix[] = {"", "", "_w8", "_w8p", "_w4p"};
    const uint32_t want_nw = want == 2 || want == 3 ? 8 : 4;
    const bool prefetch = want >= 3;
    const std::string v = quad_variant + suffix[want];
    if (want > 1 && dev.has_variant(v) && !(prefetch && has(8)) && want_nw * 32 <= max_wg &&
        coopmat_attn_shared_bytes(cm_bk, D, true, want_nw) <= max_shared) {
      quad_variant = v;
      nw = want_nw;
    } else if (dev.tuning().attn_cm > 1) {
      why = "KF_TUNE attn_cm=" + std::to_string(want) + " (" + v +
            ") does not serve this call (head dimension, block mask or shared memory)";
      return false;
    }
  }
  if (cm) bq = 16 * nw, bk = cm_bk;
  const uint32_t bq_cap = dev.tuning().attn_rows ? dev.tuning().attn_rows : rows_needed >= 32 ? 32 : rows_needed >= 16 ? 16 : 8;
  for (uint32_t q = bq_cap; q >= 8 && bq == 0; q /= 2) {
    if (q * kTpr > max_wg) continue;
    for (uint32_t k : {32u, 16u})
      if (shared_bytes(q, k, D) <= max_shared) {
        bq = q, bk = k;
        break;
      }
  }
  if (bq == 0) {
    why = "head dimension " + std::to_string(D) + " needs " + std::to_string(shared_bytes(8, 16, D)) +
          " bytes of shared memory; " + dev.info().name + " offers " + std::to_string(max_shared);
    return false;
  }

  // Key splits (the decode path): when the grid has few workgroups and there are many keys.
  const uint64_t qtiles = (rows_needed + bq - 1) / bq;
  const uint64_t base_groups = qtiles * static_cast<uint64_t>(g.Hkv) * static_cast<uint64_t>(g.nseq);
  const kf::plan::KeySplit ks = kf::plan::flash_split(g.SkT, static_cast<int64_t>(base_groups), 512, bk, dev.tuning().attn_split);
  const uint64_t nsplit = static_cast<uint64_t>(ks.n);
  // The query tiles (x) are split over several dispatches where they exceed the device's limit.
  if (static_cast<uint64_t>(g.nseq) * nsplit > 65535 || g.Hkv > 65535) {
    why = "the grid exceeds 65535 workgroups in y (kv heads) or z (sequences x key splits)";
    return false;
  }
  p = {bq, bk, nw, cm, cm_quad, bf16n, cm_variant, quad_variant, bf16n ? bf16n_base : quad_base, nsplit,
       static_cast<uint64_t>(ks.len), qtiles};
  return true;
}

}  // namespace

bool supports_attention(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  const DType dtype = call.dtype;
  const std::string kind = kind_of(call.id);
  if (kind.empty()) {
    if (why) *why = std::string("this build has no Vulkan kernel for ") + call.name();
    return false;
  }
  const std::string dt = to_string(dtype);
  if (dev.has_variant(kind + "_" + dt) && (kind != "attn_bwd_dkv" || (dev.has_variant("attn_bwd_dq_" + dt) &&
                                                                  dev.has_variant("attn_bwd_pre_" + dt)))) {
    if (call.id == OpId::attention_scores && !call.inputs.empty()) {  // a 16 x 16 tile per workgroup
      const AttnGeometry g = forward_geometry(call);
      if ((g.SqT + 15) / 16 > 65535 || g.B * g.Hq > 65535) {
        if (why) *why = "the grid of 16 x 16 score tiles exceeds 65535 workgroups in y (query tiles) or z (batch x heads)";
        return false;
      }
    }
    // A forced decode kernel (KF_TUNE attn_decode=2) serves only the calls it takes.
    if (call.id == OpId::attention && dev.tuning().attn_decode == 2 && !call.inputs.empty()) {
      DecodePlan dp;
      std::string no;
      if (!decode_plan(dev, call, forward_geometry(call), dp, no)) {
        if (why) *why = "the decode kernel was forced (KF_TUNE attn_decode=2) but " + no;
        return false;
      }
    }
    // The flash kernel's and the backward's plans, as their dispatches make them. Finding the
    // accumulators' layout (coopmat_quad_layout) may run a small kernel, once per device: the only
    // change a supports() call makes to the device.
    VulkanDevice& d = const_cast<VulkanDevice&>(dev);
    std::string no;
    if (call.id == OpId::attention && !call.inputs.empty()) {
      const AttnGeometry g = forward_geometry(call);
      DecodePlan dp;
      FlashPlan fp;
      if (!takes_decode(dev, call, g, dp) && !plan_flash(d, call, g, fp, no)) {
        if (why) *why = no;
        return false;
      }
    }
    if (call.id == OpId::attention_backward && !call.inputs.empty()) {
      BwdPlan bp;
      if (!plan_backward(d, call, backward_geometry(call), bp, no)) {
        if (why) *why = no;
        return false;
      }
    }
    return true;
  }
  if (why) {
    if (dtype == DType::f64 && call.transcendental)
      *why = std::string("GLSL has no float64 exp, so ") + call.name() + " has no f64 Vulkan kernel (use the CPU backend or allow_cpu_fallback)";
    else
      *why = std::string("this build has no Vulkan kernel for ") + call.name() + " in " + to_string(dtype);
  }
  return false;
}

Variant dispatch_attention(VulkanDevice& dev, const OpCall& call) {
  if (call.id == OpId::attention_backward) return dispatch_backward(dev, call);
  const Attrs& a = call.attrs;
  const AttnGeometry g = forward_geometry(call);
  const double scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(g.D));
  const auto u32 = [](int64_t v) { return static_cast<uint32_t>(v); };

  AttnPush pc{};
  pc.B = u32(g.B);
  pc.Hq = u32(g.Hq);
  pc.Hkv = u32(g.Hkv);
  pc.SqT = u32(g.SqT);
  pc.SkT = u32(g.SkT);
  pc.G = u32(g.Hq / g.Hkv);
  pc.nsplit = 1;
  pc.split_len = u32(g.SkT);
  set_eps(scale, pc.scale, pc.scale_lo, pc.scale_hi);

  if (call.id == OpId::attention_scores) {
    Launch l;
    l.variant = std::string("attn_scores_") + to_string(call.dtype);
    l.spec = {256u, u32(g.D)};
    l.bindings[0] = call.inputs[0].buffer;
    l.bindings[1] = call.inputs[1].buffer;
    l.bindings[3] = call.outputs[0].buffer;
    l.push = &pc;
    l.push_bytes = sizeof(pc);
    l.groups_y = u32((g.SqT + 15) / 16);
    l.groups_z = u32(g.B * g.Hq);
    // (y and z fit 65535 workgroups: supports_attention; the key tiles in x are split where they do not)
    record_split_x(dev, l, static_cast<uint64_t>((g.SkT + 15) / 16), pc.group_base);
    return "vulkan:attention_scores/tiled-16x16";
  }

  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  const size_t es = dtype_size(call.dtype);
  const bool alibi = a.alibi || has(3);

  // The decode kernel (attention_decode.comp) where it takes the call (takes_decode).
  DecodePlan dp;
  if (takes_decode(dev, call, g, dp)) return dispatch_decode(dev, call, g, dp, pc);

  const uint64_t D = static_cast<uint64_t>(g.D);
  FlashPlan fp;
  std::string no;
  if (!plan_flash(dev, call, g, fp, no)) throw Error(ErrorCode::Unsupported, "attention: " + no);  // refused by supports_attention
  const uint32_t bq = fp.bq, bk = fp.bk, nw = fp.nw;
  const bool cm = fp.cm, cm_quad = fp.cm_quad;
  const std::string &cm_variant = fp.cm_variant, &quad_variant = fp.quad_variant, cm_dt = to_string(call.dtype);
  const uint64_t nsplit = fp.nsplit, qtiles = fp.qtiles;
  const bool split = nsplit > 1;
  if (split) {
    pc.nsplit = static_cast<uint32_t>(nsplit);
    pc.split_len = static_cast<uint32_t>(fp.split_len);
  }

  // The chosen kernel (with the custom score function, if any).
  const bool custom = !a.score_mod.empty();
  const std::string variant =
      score_mod_variant(dev, cm_quad ? quad_variant : cm ? cm_variant : std::string("attn_") + to_string(call.dtype), a,
                        "attention", false);

  // The workspace: auxiliary inputs, then the partials of the split path.
  WorkspacePlan plan;
  if (a.rope) {
    const auto [pmin, npos] = plan::rope_positions(g);  // shared with CUDA (src/plan)
    int64_t first = 0;
    const auto table = rope_table(dev, g.D, a.rope_base, pmin, npos, &first);
    pc.aux_rope = plan.copy_of(table, static_cast<size_t>((pmin - first + npos) * g.D) * 4);
    pc.rope_pos0 = static_cast<int32_t>(-first);
  }
  if (has(3)) pc.aux_slopes = plan.input(call.inputs[3], es);
  if (has(4)) pc.aux_lens = plan.input(call.inputs[4], 4);
  if (has(5)) pc.aux_cuq = plan.input(call.inputs[5], 4);
  if (has(6)) pc.aux_cuk = plan.input(call.inputs[6], 4);
  if (has(7)) pc.aux_sinks = plan.input(call.inputs[7], es);
  if (has(8)) {
    pc.aux_bmask = plan.input(call.inputs[8], 4);
    pc.block_size = u32(a.block_size);
    pc.nkb = u32(call.inputs[8].shape[1]);
  }
  const uint64_t rows = static_cast<uint64_t>(g.B * g.Hq * g.SqT);
  pc.part_off = plan.region(split ? nsplit * rows * (D + 2) : 0);
  const bool amax = cm && call.dtype == DType::bf16 && !fp.bf16n;
  if (amax) pc.aux_amax = plan.region(4);
  const std::shared_ptr<Buffer> ws = plan.record(dev, "attention");
  std::shared_ptr<Buffer> k_in = call.inputs[1].buffer, v_in = call.inputs[2].buffer;
  if (amax) {
    // bf16 as f16 times a power of two per tensor: Q's, K's and V's largest magnitudes, K and V converted
    // into temporary buffers (Q is converted as the kernel stages it).
    const std::vector<std::shared_ptr<Buffer>> qkv =
        stage_bf16_as_f16(dev, ws, pc.aux_amax, {&call.inputs[0], &call.inputs[1], &call.inputs[2]}, {0, 1, 2}, "attention");
    k_in = qkv[1];
    v_in = qkv[2];
  }

  pc.softcap = static_cast<float>(a.softcap);
  pc.window = u32(a.window);
  set_dropout(pc, a);

  const bool lse = call.outputs.size() > 1;
  Launch l;
  l.variant = variant;
  l.spec = {cm ? 32u * nw : bq * kTpr,
            u32(g.D),
            bq,
            bk,
            a.causal ? 1u : 0u,
            a.window > 0 ? 1u : 0u,
            alibi ? (has(3) ? 2u : 1u) : 0u,
            a.softcap > 0 ? 1u : 0u,
            u32(a.rope),
            has(4) ? 1u : 0u,
            g.varlen ? 1u : 0u,
            has(7) ? 1u : 0u,
            has(8) ? 1u : 0u,
            a.p > 0 ? 1u : 0u,
            lse ? 1u : 0u,
            split ? 1u : 0u};
  const bool khr = dev.coopmat_attn().path == CoopmatPath::khr;
  if (cm_quad) l.spec.push_back(static_cast<uint32_t>(coopmat_quad_layout(dev, khr)));  // QLAYOUT
  l.bindings[0] = call.inputs[0].buffer;
  l.bindings[1] = k_in;
  l.bindings[2] = v_in;
  l.bindings[3] = call.outputs[0].buffer;
  l.bindings[4] = split ? ws : (lse ? call.outputs[1].buffer : nullptr);
  l.bindings[5] = ws;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups_y = u32(g.Hkv);
  l.groups_z = static_cast<uint32_t>(static_cast<uint64_t>(g.nseq) * nsplit);
  record_split_x(dev, l, qtiles, pc.group_base);
  std::string what = std::string("vulkan:attention/") +
                        (cm_quad ? dev.coopmat_attn().label() + "-quad" + quad_variant.substr(fp.quad_base.size())
                         : cm ? dev.coopmat_attn().label() : "portable") + (amax ? ",bf16-staged-as-f16" : "") +
                        (fp.bf16n ? ",bf16-native" : "") +
                        (custom ? ",score_mod" : "") + ",bq=" + std::to_string(bq) +
                        ",bk=" + std::to_string(bk);
  const std::string why_not = !cm && (call.dtype == DType::f16 || call.dtype == DType::bf16) &&
                                      dev.coopmat_attn().path == CoopmatPath::portable
                                  ? " (no tensor cores: " + dev.coopmat_attn().why + ")"
                                  : "";
  if (!split) return what + why_not;

  record_combine(dev, call, l.spec, ws, pc, rows);
  return what + ",split=" + std::to_string(nsplit) + "x" + std::to_string(pc.split_len) + why_not;
}

int64_t coopmat_quad_layout(VulkanDevice& dev, bool khr) {
  int64_t& known = dev.quad_layout_cache(khr);
  if (known != -2) return known;
  known = -1;
  const char* variant = khr ? "coopmat_khr_layout" : "coopmat_layout";
  if (khr ? dev.coopmat_attn().path != CoopmatPath::khr : !dev.coopmat_f16()) return -1;
  if (!dev.has_variant(variant)) return -1;
  // Two halves of 32 x 33 floats: the accumulator's layout, then the f16 A operand's.
  const std::shared_ptr<Buffer> out = dev.allocate(2 * 32 * 33 * sizeof(float));
  Launch l;
  l.variant = variant;
  l.bindings[0] = out;
  l.groups = 1;
  dev.record(l);
  std::vector<float> v(2 * 32 * 33);
  dev.download(*out, v.data(), v.size() * sizeof(float));
  if (!dev.options().coopmat_layout.empty()) {  // a diagnostic (KF_COOPMAT_LAYOUT): the layouts, lane by lane
    for (uint32_t half = 0; half < 2; ++half)
      for (uint32_t lane = 0; lane < 32; ++lane) {
        const float* e = &v[(half * 32 + lane) * 33];
        std::fprintf(stderr, "%s %s lane %2u: %g elements:", variant, half ? "A" : "accumulator", lane, e[0]);
        for (uint32_t i = 0; i < std::min<uint32_t>(16, static_cast<uint32_t>(e[0])); ++i)
          std::fprintf(stderr, " (%g,%g)", e[1 + i], e[17 + i]);
        std::fprintf(stderr, "\n");
      }
  }
  known = quad_layout_code(v, khr);
  return known;
}

// The rotary cos/sin table covering npos positions from pmin (attention and its backward), cached: built
// on the host in double and uploaded only when the cached one does not cover the call (plan::rope_table_for:
// a growing cache rebuilds it rarely). Returns the table with its first position in *first.
std::shared_ptr<Buffer> rope_table(VulkanDevice& dev, int64_t D, double base, int64_t pmin, int64_t npos, int64_t* first) {
  VulkanDevice::RopeCache& c = dev.rope_cache();
  const plan::RopeTable want{D, base, false, pmin, npos};
  const plan::RopeTable t = plan::rope_table_for(c.table ? c.span : plan::RopeTable{}, want);
  if (!c.table || t.pmin != c.span.pmin || t.npos != c.span.npos || t.D != c.span.D || t.base != c.span.base) {
    const std::vector<float> v = rope_values(D, base, t.pmin, t.npos);
    c.table = dev.allocate(v.size() * 4);
    dev.upload(*c.table, v.data(), v.size() * 4);
    c.span = t;
  }
  *first = c.span.pmin;
  return c.table;
}

}  // namespace kf::hal::vk
