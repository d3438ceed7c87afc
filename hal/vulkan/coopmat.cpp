// The KHR cooperative-matrix shapes of a device, and the matrix products' choice of extension (coopmat.hpp).
#include "hal/vulkan/coopmat.hpp"

namespace kf::hal::vk {

const char* const kKhrShapes[kKhrShapeCount] = {"16x16x16", "16x8x16", "16x8x8", "8x16x16"};

namespace {
std::string component_name(VkComponentTypeKHR t) {
  switch (t) {
    case 0: return "f16";
    case 1: return "f32";
    case 2: return "f64";
    case 3: return "s8";
    case 4: return "s16";
    case 5: return "s32";
    case 6: return "s64";
    case 7: return "u8";
    case 8: return "u16";
    case 9: return "u32";
    case 10: return "u64";
    case VK_COMPONENT_TYPE_BFLOAT16_KHR: return "bf16";
    default: return "type " + std::to_string(static_cast<uint32_t>(t));
  }
}
std::string scope_name(VkScopeKHR s) {
  switch (s) {
    case 1: return "device";
    case 2: return "workgroup";
    case 3: return "subgroup";
    case 5: return "queue family";
    default: return "scope " + std::to_string(static_cast<uint32_t>(s));
  }
}
}  // namespace

std::vector<CoopmatShape> query_coopmat_khr(VkPhysicalDevice pd) {
  std::vector<CoopmatShape> out;
  const auto get = reinterpret_cast<PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR>(
      vkGetInstanceProcAddr(volkGetLoadedInstance(), "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"));
  if (!get) return out;
  uint32_t n = 0;
  if (get(pd, &n, nullptr) != VK_SUCCESS || n == 0) return out;
  std::vector<VkCooperativeMatrixPropertiesKHR> p(n);
  for (auto& x : p) x = {VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
  if (get(pd, &n, p.data()) != VK_SUCCESS) return out;
  for (uint32_t i = 0; i < n; ++i) {
    const auto& x = p[i];
    out.push_back({x.MSize, x.NSize, x.KSize, component_name(x.AType), component_name(x.BType),
                   component_name(x.CType), component_name(x.ResultType), x.saturatingAccumulation != 0,
                   scope_name(x.scope)});
  }
  return out;
}

bool coopmat_khr_in_compute(VkPhysicalDevice pd) {
  VkPhysicalDeviceCooperativeMatrixPropertiesKHR cp{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_PROPERTIES_KHR};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, &cp};
  vkGetPhysicalDeviceProperties2(pd, &p2);
  return (cp.cooperativeMatrixSupportedStages & VK_SHADER_STAGE_COMPUTE_BIT) != 0;
}

namespace {
// The variant name's suffix of a KHR shape on a subgroup size (CoopmatChoice::variant).
std::string khr_suffix(const std::string& shape, uint32_t subgroup) {
  std::string v = shape == kKhrShapes[0] ? "" : "_" + shape;
  if (subgroup != 32) v += "_sg" + std::to_string(subgroup);
  return v;
}
}  // namespace

std::string CoopmatChoice::variant(std::string nv_name) const {
  if (path != CoopmatPath::khr) return nv_name;
  const std::string prefix = "mm_coopmat_";
  return "mm_coopmat_khr_" + nv_name.substr(prefix.size()) + khr_suffix(shape, subgroup);
}

std::string CoopmatChoice::label() const {
  if (path != CoopmatPath::khr) return "coopmat-nv";
  return "coopmat-khr-" + shape + (subgroup != 32 ? "-sg" + std::to_string(subgroup) : "");
}

std::string CoopmatChoice::describe() const {
  if (path == CoopmatPath::nv) return "nv";
  if (path == CoopmatPath::khr)
    return "khr " + shape + (subgroup != 32 ? " on subgroups of " + std::to_string(subgroup) : "");
  return "none: " + why;
}

bool SubgroupSizes::can_require(uint32_t s) const {
  return control && s != 0 && min <= s && s <= max && kKhrMaxInvocations / s <= max_subgroups;
}

uint32_t khr_variant_subgroup(const std::string& variant) {
  const std::string base = variant.substr(0, variant.find('#'));
  if (base.find("_khr_") == std::string::npos) return 0;
  for (size_t at = base.find("_sg"); at != std::string::npos; at = base.find("_sg", at + 1)) {
    size_t end = at + 3;
    while (end < base.size() && base[end] >= '0' && base[end] <= '9') ++end;
    if (end > at + 3 && (end == base.size() || base[end] == '_'))
      return static_cast<uint32_t>(std::stoul(base.substr(at + 3, end - at - 3)));
  }
  return 32;
}

CoopmatOffer coopmat_offer(const Caps& caps, bool nv_usable, bool khr_features, const SubgroupSizes& sizes,
                           const std::string& nv_needs, const std::string& khr_needs,
                           const std::function<bool(const std::string&)>& has_variant) {
  CoopmatOffer o;
  const std::string sg = "subgroups of " + std::to_string(caps.subgroup_size) + " (the kernels are written for 32)";
  const bool sg32 = caps.subgroup_size == 32 || sizes.can_require(32);
  if (!caps.coopmat_nv) o.nv_why = "the device lacks VK_NV_cooperative_matrix";
  else if (!nv_usable) o.nv_why = caps.subgroup_size != 32 ? sg : "no 16x16x16 f16 x f16 -> f32 subgroup shape or "
                                                                  "features (shaderFloat16, vulkanMemoryModel) off";
  else if (!has_variant(nv_needs)) o.nv_why = "this build's glslc did not compile GL_NV_cooperative_matrix";
  else o.nv = true;
  if (!caps.coopmat_khr) {
    o.khr_why = "the device lacks VK_KHR_cooperative_matrix";
  } else if (!khr_features) {
    o.khr_why = "its cooperativeMatrix, shaderFloat16 or vulkanMemoryModel feature is off, or compute is not among "
                "its cooperative-matrix stages";
  } else if (!has_variant(khr_needs)) {
    o.khr_why = "this build has no KHR variants (no glslang 13 at build time: tools/install-deps.sh)";
  } else {
    // Why a listed shape with kernels was passed over for its subgroup size (the first such shape).
    std::string sg_why;
    const std::string range = sizes.control ? std::to_string(sizes.min) + ".." + std::to_string(sizes.max) +
                                                  ", at most " + std::to_string(sizes.max_subgroups) +
                                                  " subgroups per workgroup"
                                            : "no subgroup size control with full subgroups for compute";
    for (const char* want : kKhrShapes)
      for (const auto& s : caps.coopmat_khr_shapes) {
        const std::string name = std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
        if (name != want || s.a != "f16" || s.b != "f16" || s.c != "f32" || s.result != "f32" || s.scope != "subgroup")
          continue;
        // 8x16x16: the sizes Intel's matrix engines take it on (8 on Xe-HPG, 16 on Xe2), the smaller first.
        const bool m8 = s.m == 8;
        const std::vector<uint32_t> candidates = m8 ? std::vector<uint32_t>{8, 16} : std::vector<uint32_t>{32};
        bool built = false, taken = false;
        for (uint32_t size : candidates) {
          if (!has_variant(khr_needs + khr_suffix(name, size))) continue;
          built = true;
          // On 8, tile c13's 64 subgroups stage 32 KiB of fragments beside B's 20 KiB (shaders/variants.cmake):
          // 53248 bytes of shared memory, past the 48 KiB many devices offer (an H200 lost the device).
          const bool fits = size != 8 || caps.max_shared_bytes >= kKhrSg8SharedBytes;
          if (m8 ? sizes.can_require(size) && fits : sg32) {
            o.khr_shapes.push_back({name, size});
            taken = true;
            break;
          }
        }
        if (built && !taken && sg_why.empty())
          sg_why = m8 ? "it lists " + name + ", whose kernels run on subgroups of 8 (with " +
                            std::to_string(kKhrSg8SharedBytes) + " bytes of shared memory) or 16 that a pipeline must "
                            "require (its sizes: " + range + "; " + std::to_string(caps.max_shared_bytes) + " bytes)"
                      : sg + ", and it cannot require 32 (subgroup size control with full subgroups)";
        break;
      }
    if (o.khr_shapes.empty())
      o.khr_why = !sg_why.empty() ? sg_why : "it lists no f16 x f16 -> f32 subgroup shape kf has kernels for";
  }
  return o;
}

CoopmatChoice choose_coopmat(const CoopmatOffer& offer, uint32_t coopmat, const char* knob, uint32_t shape,
                             bool prefer_khr, bool* forced_missing) {
  *forced_missing = false;
  CoopmatChoice c;
  // KHR at the forced shape, or the first the device lists.
  std::string khr_shape, khr_why = offer.khr_why;
  uint32_t khr_subgroup = 32;
  for (const auto& s : offer.khr_shapes)
    if (khr_shape.empty() && (shape == 0 || s.shape == kKhrShapes[shape - 1])) {
      khr_shape = s.shape;
      khr_subgroup = s.subgroup;
    }
  if (khr_shape.empty() && shape != 0 && khr_why.empty())
    khr_why = std::string("KF_TUNE coopmat_shape=") + kKhrShapes[shape - 1] + " is not among the device's f16 shapes";
  const auto take_nv = [&] { c.path = CoopmatPath::nv; };
  const auto take_khr = [&] {
    c.path = CoopmatPath::khr;
    c.shape = khr_shape;
    c.subgroup = khr_subgroup;
  };
  switch (coopmat) {
    case 1:  // nv
      if (offer.nv) {
        take_nv();
      } else {
        *forced_missing = true;
        c.why = "NV: " + offer.nv_why;
      }
      break;
    case 2:  // khr
      if (!khr_shape.empty()) {
        take_khr();
      } else {
        *forced_missing = true;
        c.why = "KHR: " + khr_why;
      }
      break;
    case 3: c.why = std::string("KF_TUNE ") + knob + "=portable"; break;
    default:  // the faster where the device offers both (prefer_khr: measured per family), else either
      if (!khr_shape.empty() && (prefer_khr || !offer.nv)) take_khr();
      else if (offer.nv) take_nv();
      else c.why = "NV: " + offer.nv_why + "; KHR: " + khr_why;
  }
  return c;
}

int64_t quad_layout_code(const std::vector<float>& v, bool khr) {
  if (v.size() < 2 * 32 * 33) return -1;
  // The quad form: element i of every invocation at row lane / 4 + 8 H(i), column 2 (lane % 4) + X(i) +
  // 8 Y(i), the same H, X, Y for every invocation; coded as bits 3 i (H), 3 i + 1 (X), 3 i + 2 (Y).
  int64_t code = 0;
  bool ok = true;
  for (uint32_t i = 0; i < 8 && ok; ++i) {
    const float* e0 = &v[0];
    ok = e0[0] == 8.0f && (e0[1 + i] == 0.0f || e0[1 + i] == 8.0f);
    const uint32_t H = e0[1 + i] == 8.0f ? 1 : 0, X = static_cast<uint32_t>(e0[17 + i]) % 2,
                   Y = static_cast<uint32_t>(e0[17 + i]) / 8;
    code |= int64_t((H | X << 1 | Y << 2)) << (3 * i);
    for (uint32_t lane = 0; lane < 32 && ok; ++lane) {
      const float* e = &v[lane * 33];
      ok = e[0] == 8.0f && e[1 + i] == float(lane / 4 + 8 * H) && e[17 + i] == float(2 * (lane % 4) + X + 8 * Y);
    }
  }
  // KHR: an A operand's element i where the accumulator's is (the count, then the first 8 rows and
  // columns of each invocation; NV converts between the two itself).
  for (uint32_t k = 0; k < 32 * 33 && ok && khr; ++k) {
    const uint32_t i = k % 33;
    ok = (i > 8 && i < 17) || i > 24 || v[k] == v[32 * 33 + k];
  }
  return ok ? code : -1;
}

bool lists_bf16_16x16x16(const Caps& caps) {
  for (const auto& s : caps.coopmat_khr_shapes)
    if (s.m == 16 && s.n == 16 && s.k == 16 && s.a == "bf16" && s.b == "bf16" && s.c == "f32" && s.result == "f32" &&
        s.scope == "subgroup")
      return true;
  return false;
}

std::string Bf16Choice::describe() const { return native ? "native" : "scaled: " + why; }

std::string Bf16Choice::variant(const std::string& f16_variant) {
  static const std::string f16_prefix = "mm_coopmat_f16_";
  return "mm_coopmat_khr_bf16n_" + f16_variant.substr(f16_variant.rfind(f16_prefix, 0) == 0 ? f16_prefix.size() : 0);
}

Bf16Choice choose_coopmat_bf16(const Caps& caps, const CoopmatChoice& products, bool features, uint32_t knob,
                               const std::function<bool(const std::string&)>& has_variant, bool* forced_missing) {
  *forced_missing = false;
  Bf16Choice c;
  if (knob == 2) c.why = "KF_TUNE bf16_coopmat=scaled";
  else if (products.path != CoopmatPath::khr)
    c.why = "the products do not run on KHR cooperative matrices (" + products.describe() + ")";
  else if (!caps.bfloat16) c.why = "the device lacks VK_KHR_shader_bfloat16";
  else if (!features) c.why = "its shaderBFloat16Type or shaderBFloat16CooperativeMatrix feature is off";
  else if (!lists_bf16_16x16x16(caps)) c.why = "it lists no bf16 x bf16 -> f32 16x16x16 subgroup shape";
  else if (!has_variant("mm_coopmat_khr_bf16n_c1"))
    c.why = "this build has no bf16-native variants (no slang at build time: tools/install-deps.sh)";
  else c.native = true;
  *forced_missing = knob == 1 && !c.native;
  return c;
}

}  // namespace kf::hal::vk
