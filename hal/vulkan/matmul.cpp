// The matrix products (docs/ops.md section 4): linear and matmul on the tensor-core kernel
// (mm_coopmat.comp) where it applies, else the portable tiled kernel (mm.comp) or, for few rows, the
// few-rows kernel (gemv.cpp); bf16 operands read as bf16 (VK_KHR_shader_bfloat16) or converted to scaled f16
// for the tensor cores; the output dtype.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>

#include "hal/vulkan/device.hpp"
#include "plan/dropout.hpp"
#include "hal/vulkan/kernels_common.hpp"

namespace kf::hal::vk {
namespace {

// The tile shapes of mm_coopmat.comp (variants.cmake): KF_TUNE mm_cfg=k picks entry k - 1.
struct CoopmatConfig {
  const char* variant;
  uint32_t bm, bn;
  const char* label;
  bool whole_tiles = false;  // only for M % bm == N % bn == K % 16 == 0 (else the default shape serves)
};
constexpr CoopmatConfig kCoopmatConfigs[] = {
    {"mm_coopmat_f16_c1", 128, 128, "128x128,8sg,bk32,1stage"},
    {"mm_coopmat_f16_c2", 128, 128, "128x128,8sg,bk32,2stage"},
    {"mm_coopmat_f16_c3", 128, 128, "128x128,8sg,bk64,1stage"},
    {"mm_coopmat_f16_c4", 128, 128, "128x128,4sg,bk32,2stage"},
    {"mm_coopmat_f16_c5", 128, 256, "128x256,8sg,bk32,1stage"},
    {"mm_coopmat_f16_c6", 128, 128, "128x128,8sg-4x2,bk32,2stage"},
    {"mm_coopmat_f16_c7", 128, 128, "128x128,8sg,bk32,2stage,prefetch2"},
    {"mm_coopmat_f16_c8", 128, 128, "128x128,8sg-4x2,bk32,2stage,prefetch2"},
    {"mm_coopmat_f16_c9", 128, 128, "128x128,16sg,bk32,2stage"},
    {"mm_coopmat_f16_c10", 128, 128, "128x128,16sg,bk32,2stage,prefetch2"},
    {"mm_coopmat_f16_c11", 128, 128, "128x128,8sg,direct-global", true},
    // 16 subgroups of 32 x 64 sharing a larger staged tile (attention gained 1.38x from that).
    {"mm_coopmat_f16_c12", 256, 128, "256x128,16sg,bk32,1stage"},
    {"mm_coopmat_f16_c13", 128, 256, "128x256,16sg,bk32,1stage"},
    // 64 rows: products with few output rows (a convolution's 64 channels) waste no half tile.
    {"mm_coopmat_f16_c14", 64, 256, "64x256,8sg,bk32,1stage"},
};
// On an H100, c1..c10 but c4, c5 measured within 3 % of each other
// (137-147 TFLOP/s at 4096^3); c12 and c13, whose 16 subgroups share a staged tile twice as large,
// 159-166. The default: c14 for at most 64 rows, c13 when the grid still has two waves of workgroups
// on a large GPU, c1 (the least shared memory, twice the workgroups) otherwise.
constexpr size_t kCoopmatSmall = 0, kCoopmatLarge = 12, kCoopmatFewRows = 13;

size_t default_coopmat_config(uint64_t M, uint64_t N, uint64_t batches) {
  if (M <= 64) return kCoopmatFewRows;
  const CoopmatConfig& big = kCoopmatConfigs[kCoopmatLarge];
  const uint64_t groups = (M + big.bm - 1) / big.bm * ((N + big.bn - 1) / big.bn) * batches;
  return groups >= 264 ? kCoopmatLarge : kCoopmatSmall;
}

}  // namespace

std::string default_coopmat_variant(uint64_t M, uint64_t N, uint64_t batches, uint32_t* bm, uint32_t* bn) {
  const CoopmatConfig& c = kCoopmatConfigs[default_coopmat_config(M, N, batches)];
  *bm = c.bm;
  *bn = c.bn;
  return c.variant;
}

namespace {
// record_bf16_scaled's column form: bands of 64 columns; slices of at least 256 rows, as many as make
// about 8192 workgroups (a GPU filled several times over, without more atomics than that needs: pass 0
// makes one per column and slice).
struct ColSlices {
  uint64_t bands, slice_rows, slices, groups;
};
ColSlices col_slices(uint64_t batches, uint64_t rows, uint64_t cols) {
  ColSlices c;
  c.bands = (cols / 8 + 7) / 8;
  const uint64_t most = std::max<uint64_t>(1, (rows + 255) / 256);
  const uint64_t want = std::clamp<uint64_t>(8192 / std::max<uint64_t>(1, c.bands * batches), 1, most);
  c.slice_rows = ((rows + want - 1) / want + 31) / 32 * 32;
  c.slices = std::max<uint64_t>(1, (rows + c.slice_rows - 1) / c.slice_rows);
  c.groups = c.bands * c.slices * batches;
  return c;
}
}  // namespace

std::string bf16_scaled_refusal(uint64_t batches, uint64_t rows, uint64_t cols, bool by_cols, uint64_t scale_off) {
  if (batches * rows * cols / 8 > 0xffffffffull || scale_off + batches * (by_cols ? cols : rows) > 0xffffffffull)
    return std::to_string(batches * rows * cols) + " elements exceed the 32-bit indices of its conversion";
  if (!by_cols && (batches * rows + 3) / 4 > 65535ull * 65535ull) return "too many rows";
  if (by_cols && col_slices(batches, rows, cols).groups > 65535ull * 65535ull) return "too many columns";
  return "";
}

void record_bf16_scaled(VulkanDevice& dev, const std::shared_ptr<Buffer>& src, const std::shared_ptr<Buffer>& dst,
                                      const std::shared_ptr<Buffer>& scales, uint64_t batches, uint64_t rows,
                                      uint64_t cols, bool by_cols, uint64_t scale_off, uint64_t max_off) {
  if (const std::string no = bf16_scaled_refusal(batches, rows, cols, by_cols, scale_off); !no.empty())
    throw Error(ErrorCode::Unsupported, "bf16 tensor-core operand: " + no);  // supports_matmul refuses these
  Launch c;
  c.bindings[0] = src;
  c.bindings[4] = dst;
  c.bindings[5] = scales;
  if (!by_cols) {
    const uint64_t all = batches * rows;  // the batches' rows follow each other
    struct {
      uint32_t rows, K, scale_off;
    } cp{static_cast<uint32_t>(all), static_cast<uint32_t>(cols), static_cast<uint32_t>(scale_off)};
    c.variant = "bf16_rows_to_f16";
    c.push = &cp;
    c.push_bytes = sizeof(cp);
    c.groups = static_cast<uint32_t>(std::min<uint64_t>((all + 3) / 4, 65535));
    c.groups_y = static_cast<uint32_t>((all + 4ull * 65535 - 1) / (4ull * 65535));
    dev.record(c);
    return;
  }
  // Columns: bands and slices of rows (col_slices).
  const ColSlices cs = col_slices(batches, rows, cols);
  const uint64_t bands = cs.bands, slice_rows = cs.slice_rows, slices = cs.slices, groups = cs.groups;
  struct {
    uint32_t rows, cols, scale_off, max_off, slice_rows, bands, slices, batches;
  } cp{static_cast<uint32_t>(rows),       static_cast<uint32_t>(cols),  static_cast<uint32_t>(scale_off),
       static_cast<uint32_t>(max_off),    static_cast<uint32_t>(slice_rows), static_cast<uint32_t>(bands),
       static_cast<uint32_t>(slices),     static_cast<uint32_t>(batches)};
  dev.record_fill(scales, 0u, static_cast<size_t>(4 * batches * cols), static_cast<size_t>(4 * max_off));
  c.variant = "bf16_cols_to_f16";
  c.push = &cp;
  c.push_bytes = sizeof(cp);
  c.groups = static_cast<uint32_t>(std::min<uint64_t>(groups, 65535));
  c.groups_y = static_cast<uint32_t>((groups + 65534) / 65535);
  for (uint32_t pass : {0u, 1u}) {  // the columns' maxima, then the conversion
    c.spec = {pass};
    dev.record(c);
  }
}

std::string out_dtype_label(const OpCall& call) {
  const DType odt = call.out_dtype;
  return odt == call.dtype ? "" : std::string(",out-") + to_string(odt);
}

std::string out_dtype_variant(VulkanDevice& dev, const OpCall& call, const std::string& base) {
  const DType odt = call.out_dtype;
  if (odt == call.dtype) return base;
  // Those the library embeds (variants.cmake: the KHR kernels' default tiles at 16x16x16); the others are
  // compiled at run time, a KHR one through its NV form (runtime_shader.hpp).
  if (const std::string built = base + "_o" + to_string(odt); dev.has_variant(built)) return built;
  const std::string what = std::string(call.name()) + " storing " + to_string(odt) + " from " + to_string(call.dtype) + " inputs";
  if (odt == DType::f64)
    throw Error(ErrorCode::Unsupported, what + ": no Vulkan kernel stores f64 from 16- or 32-bit inputs");
  return dev.runtime_variant(base, std::string("out_dtype:") + to_string(odt), what + " (out_dtype)", [&] {
    std::string def = std::string("ODT_") + to_string(odt);
    for (char& c : def) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return Defines{{def, ""}};
  });
}

namespace {

// The product of a linear (B = W [N, K]) or matmul (B [.., K, N]) call: its sizes and the paths it takes.
struct MatmulPlan {
  bool linear = false, b_batched = false;
  uint64_t M = 0, N = 0, K = 0, batches = 1;
  bool gemv = false;            // the few-rows kernel (mm_gemv.comp)
  const CoopmatConfig* cfg = nullptr;
  std::string cm_variant;       // the tensor-core kernel's variant
  bool coopmat_fits = false;    // the tensor-core path takes the call
  std::string cm_why;           // f16 / bf16 off the tensor cores for want of them: why (last_variant)
  bool bf16_native = false;     // bf16 operands as bf16 (mm_coopmat_khr_bf16n_*), not scaled f16
};

// preconverted: B comes as scaled f16 (ScaledB: linear_cross_entropy converts W once for all its chunks), so
// the call takes the scaled path whatever the device's bf16 choice.
MatmulPlan plan_matmul(const VulkanDevice& dev, const OpCall& call, bool preconverted = false) {
  MatmulPlan p;
  const Tuning& t = dev.tuning();
  p.linear = call.id == OpId::linear || call.id == OpId::linear_dropout;  // W [N, K]
  const Shape& a = call.inputs[0].shape;
  const Shape& b = call.inputs[1].shape;
  p.K = static_cast<uint64_t>(a.back());
  p.N = static_cast<uint64_t>(p.linear ? b[0] : b.back());
  p.M = p.linear ? static_cast<uint64_t>(call.inputs[0].numel) / p.K : static_cast<uint64_t>(a[a.size() - 2]);
  p.batches = static_cast<uint64_t>(call.inputs[0].numel) / (p.M * p.K);
  p.b_batched = !p.linear && b.size() > 2;
  // Few rows (decode): the weight-streaming kernel, linear's layout only (mm_gemv.comp). Forced with
  // KF_TUNE mm_path=3; chosen automatically for M <= 16 (a 64- or 128-row tile would be mostly empty).
  p.gemv = p.linear && (t.mm_path == 3 || (t.mm_path == 0 && p.M <= 16));
  // The tensor-core path needs a cooperative-matrix path on the device (VulkanDevice::coopmat_mm: NV, or
  // KHR at a shape it lists) and whole 16-byte rows.
  const size_t auto_cfg = default_coopmat_config(p.M, p.N, p.batches);
  p.cfg = &kCoopmatConfigs[t.mm_cfg ? t.mm_cfg - 1 : auto_cfg];
  if (p.cfg->whole_tiles && (p.M % p.cfg->bm || p.N % p.cfg->bn || p.K % 16)) p.cfg = &kCoopmatConfigs[auto_cfg];
  // bf16: A's rows (all batches') and B's rows (linear's W [N, K]) or columns (matmul's [.., K, N], per
  // batch when B is batched: the factors are per batch, indexed by bz in the epilogue) as f16 times
  // powers of two (bf16_rows_to_f16.comp), undone in the epilogue; the output, bias and residual stay
  // bf16.
  const bool bf16 = call.dtype == DType::bf16;
  const CoopmatChoice& cm = dev.coopmat_mm();
  const std::string tile = std::string(p.cfg->variant).substr(std::string("mm_coopmat_f16_").size());
  // bf16 native (VulkanDevice::coopmat_bf16, KF_TUNE bf16_coopmat): bf16 x bf16 -> f32 at 16x16x16 on the
  // operands as stored; no conversion, so none of its limits below.
  // Another output dtype of bf16 native: only the build's variants (the run-time compiler has no bf16 types).
  p.bf16_native = bf16 && dev.coopmat_bf16().native && !preconverted &&
                  (call.out_dtype == call.dtype ||
                   dev.has_variant(Bf16Choice::variant(p.cfg->variant) + "_o" + to_string(call.out_dtype)));
  p.cm_variant = p.bf16_native ? Bf16Choice::variant(p.cfg->variant)
                               : cm.variant(bf16 ? "mm_coopmat_bf16_" + tile : std::string(p.cfg->variant));
  const uint64_t b_factors = (p.b_batched ? p.batches : 1) * p.N;  // B's inverse factors (words)
  const bool bf16_fits = p.bf16_native ||
                         (bf16 && dev.has_variant("bf16_rows_to_f16") && (p.linear || dev.has_variant("bf16_cols_to_f16")) &&
                          p.batches * p.M + 2 * b_factors <= 0xffffffffull &&
                          (p.batches * p.M * p.K / 8 <= 0xffffffffull) && (p.batches * p.M + 3) / 4 <= 65535ull * 65535ull &&
                          b_factors * p.K / 8 <= 0xffffffffull);
  // Another output dtype is a variant of the kernel (out_dtype_variant), on either path.
  p.coopmat_fits = cm.path != CoopmatPath::portable && (call.dtype == DType::f16 || bf16_fits) && p.K % 8 == 0 &&
                   (p.linear || p.N % 8 == 0) && dev.has_variant(p.cm_variant) && p.M + p.N <= 0xffffffffull;
  if ((call.dtype == DType::f16 || bf16) && cm.path == CoopmatPath::portable) p.cm_why = cm.why;
  return p;
}

// The few-rows kernel's rows of W per workgroup and its grid (mm_gemv.comp): at most 65535 x 65535.
uint32_t gemv_rows(const Tuning& t) { return t.gemv_rows ? t.gemv_rows : 8u; }
bool gemv_fits(const Tuning& t, uint64_t M, uint64_t N) {
  const uint64_t mt = std::min<uint64_t>(M, 16), rows = gemv_rows(t);
  return (N + rows - 1) / rows <= 65535 && (M + mt - 1) / mt <= 65535;
}

}  // namespace

bool supports_matmul(const VulkanDevice& dev, const OpCall& call, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const bool linear = call.id == OpId::linear || call.id == OpId::linear_dropout;
  if (dev.tuning().mm_path == 3 && !linear)
    return no("the few-rows / split-K path was forced (KF_TUNE mm_path=3) but serves linear's W [N, K] layout only");
  if (call.out_dtype == DType::f64 && call.dtype != DType::f64)
    return no(std::string("no Vulkan kernel stores f64 from ") + to_string(call.dtype) + " inputs (out_dtype)");
  if (call.inputs.empty()) return true;  // the op and dtype alone
  const MatmulPlan p = plan_matmul(dev, call);
  if (p.gemv) {
    if (!gemv_fits(dev.tuning(), p.M, p.N))
      return no("the few-rows kernel covers at most " + std::to_string(65535ull * gemv_rows(dev.tuning())) +
                " outputs and 1048560 rows (N = " + std::to_string(p.N) + ", M = " + std::to_string(p.M) + ")");
    return true;
  }
  if (dev.tuning().mm_path == 2 && !p.coopmat_fits)
    return no("the cooperative-matrix path was forced (KF_TUNE mm_path=2) but needs tensor cores (here: " +
              dev.coopmat_mm().describe() + "), dtype f16 or bf16, K % 8 == 0, for B [K, N] N % 8 == 0 and, on "
              "KHR, the inputs' dtype as out_dtype");
  // bf16 operands on the tensor cores are converted first (record_bf16_scaled, as dispatch_matmul calls it).
  if (p.coopmat_fits && dev.tuning().mm_path != 1 && call.dtype == DType::bf16 && !p.bf16_native) {
    const uint64_t b_factors = (p.b_batched ? p.batches : 1) * p.N;
    std::string r = bf16_scaled_refusal(1, p.batches * p.M, p.K, false, 0);
    if (r.empty())
      r = bf16_scaled_refusal(p.linear ? 1 : b_factors / p.N, p.linear ? p.N : p.K, p.linear ? p.K : p.N, !p.linear,
                              p.batches * p.M);
    if (!r.empty()) return no("bf16 tensor-core operand: " + r);
  }
  return true;
}

// linear (B = W [N, K]) and matmul (B [.., K, N]): the tensor-core kernel (mm_coopmat.comp) where it
// applies, else the portable tiled kernel (shaders/mm.comp).
Variant dispatch_matmul(VulkanDevice& dev, const OpCall& call, const ScaledB* scaled_b) {
  const MatmulPlan plan = plan_matmul(dev, call, scaled_b != nullptr);
  const bool linear = plan.linear;
  const uint64_t K = plan.K, N = plan.N, M = plan.M, batches = plan.batches;
  const bool b_batched = plan.b_batched;
  const bool has_bias = call.inputs.size() > 2 && call.inputs[2].buffer;
  const bool has_res = call.inputs.size() > 3 && call.inputs[3].buffer;
  if (plan.gemv) return dispatch_gemv(dev, call);  // its grid was checked by supports_matmul
  MatmulPush pc{static_cast<uint32_t>(M), static_cast<uint32_t>(N), static_cast<uint32_t>(K),
                static_cast<uint32_t>(M * K), b_batched ? static_cast<uint32_t>(K * N) : 0u, static_cast<uint32_t>(M * N),
                static_cast<uint32_t>(call.attrs.seed), static_cast<uint32_t>(call.attrs.seed >> 32),
                static_cast<uint32_t>(call.attrs.offset), static_cast<uint32_t>(call.attrs.offset >> 32),
                plan::dropout_threshold(call.attrs.p), static_cast<float>(1.0 / (1.0 - call.attrs.p))};
  // linear_dropout: the dropout is in every product kernel's epilogue (DROPOUT, spec constant 5).
  const bool drop = call.id == OpId::linear_dropout && call.attrs.p > 0;
  const CoopmatConfig& cfg = *plan.cfg;
  const bool bf16 = call.dtype == DType::bf16;
  const std::string& cm_variant = plan.cm_variant;
  const uint64_t b_factors = (b_batched ? batches : 1) * N;  // B's inverse factors (words)
  // A forced tensor-core path (KF_TUNE mm_path=2) that does not fit was refused by supports_matmul.
  const bool coopmat = plan.coopmat_fits && dev.tuning().mm_path != 1;
  const uint32_t tile_m = coopmat ? cfg.bm : 64, tile_n = coopmat ? cfg.bn : 64;
  std::shared_ptr<Buffer> a_in = call.inputs[0].buffer, b_in = call.inputs[1].buffer, inv_scales;
  const bool scaled = coopmat && bf16 && !plan.bf16_native;  // operands converted to f16 first
  if (scaled) {
    a_in = dev.workspace(static_cast<size_t>(batches * M * K * 2), 1);
    inv_scales = scaled_b ? scaled_b->scales : dev.workspace(static_cast<size_t>((batches * M + 2 * b_factors) * 4), 3);
    record_bf16_scaled(dev, call.inputs[0].buffer, a_in, inv_scales, 1, batches * M, K, false, 0);
    if (scaled_b) {
      b_in = scaled_b->b;
      pc.scale_b = scaled_b->scale_b;
    } else {
      b_in = dev.workspace(static_cast<size_t>(b_factors * K * 2), 2);
      pc.scale_b = static_cast<uint32_t>(batches * M);
      // B's factors after A's, then the column maxima (scratch).
      record_bf16_scaled(dev, call.inputs[1].buffer, b_in, inv_scales, linear ? 1 : b_factors / N, linear ? N : K,
                         linear ? K : N, !linear, pc.scale_b, pc.scale_b + b_factors);
    }
    pc.scale_stride_b = b_batched ? static_cast<uint32_t>(N) : 0u;
  }
  Launch l;
  l.variant = out_dtype_variant(dev, call, coopmat ? cm_variant : kernel_variant_name(call, call.dtype, false));
  l.spec = {256u, linear ? 1u : 0u, has_bias ? 1u : 0u, has_res ? 1u : 0u, static_cast<uint32_t>(call.attrs.act)};
  l.spec.push_back(drop ? 1u : 0u);
  if (scaled) l.spec.insert(l.spec.end(), {0u, 0u, 0u, 0u, 1u});  // A_KM, ACC_OUT, BIAS_ROW, ROW_SS off; SCALES
  l.bindings[0] = a_in;
  l.bindings[1] = b_in;
  if (inv_scales) l.bindings[5] = inv_scales;
  if (has_bias) l.bindings[2] = call.inputs[2].buffer;
  if (has_res) l.bindings[3] = call.inputs[3].buffer;
  l.bindings[4] = call.outputs[0].buffer;
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = static_cast<uint32_t>((N + tile_n - 1) / tile_n);
  l.groups_y = static_cast<uint32_t>((M + tile_m - 1) / tile_m);
  l.groups_z = static_cast<uint32_t>(batches);
  dev.record(l);
  const std::string out = out_dtype_label(call);
  if (!coopmat)
    return "vulkan:mm/portable-tiled-64x64" + out + (plan.cm_why.empty() ? "" : " (no tensor cores: " + plan.cm_why + ")");
  // The native variants are 16x16x16 whatever shape the f16 products take.
  std::string v = "vulkan:mm/" + (plan.bf16_native ? std::string(Bf16Choice::kLabel) : dev.coopmat_mm().label()) +
                  "-" + cfg.label + out;
  if (plan.bf16_native) v += ",bf16-native";
  else if (bf16) v += linear ? ",bf16-rows-as-scaled-f16" : ",bf16-rows-cols-as-scaled-f16";
  if (bf16 && scaled_b) v += ",b-preconverted";
  return v;
}

// The in-register ceiling of the tensor-core path (mm_coopmat_peak.comp): 8 subgroups per workgroup,
// 8 accumulators each, 16x16x16 multiply-adds; enough workgroups to fill any current GPU several times.
double record_matrix_peak(VulkanDevice& dev, std::string* what) {
  if (!dev.coopmat_f16() || !dev.has_variant("mm_coopmat_peak_f16")) return 0;
  constexpr uint32_t kGroups = 4096, kIters = 2048;
  struct {
    uint32_t iters;
  } pc{kIters};
  Launch l;
  l.variant = "mm_coopmat_peak_f16";
  if (dev.tuning().mm_peak) l.variant += "_l" + std::to_string(dev.tuning().mm_peak);
  l.bindings[0] = dev.workspace(static_cast<size_t>(kGroups) * 8 * 8 * 256 * sizeof(float));
  l.push = &pc;
  l.push_bytes = sizeof(pc);
  l.groups = kGroups;
  dev.record(l);
  if (what) {
    *what = "NV cooperative matrix 16x16x16 f16 -> f32, operands in registers";
    if (dev.tuning().mm_peak) *what = l.variant + " (KF_TUNE mm_peak): multiply-adds with shared-memory fragment loads";
  }
  return 2.0 * 16 * 16 * 16 * 8.0 * 8.0 * kIters * kGroups;
}

}  // namespace kf::hal::vk
