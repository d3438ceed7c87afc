// Device limits that a call may exceed and that the backends work around (docs/backends.md): grids wider
// than the device's maxComputeWorkGroupCount run as several dispatches. KF_TUNE max_groups lowers the
// limit, so that small cases take the split path on any Vulkan device (lavapipe in CI).
#include "common.hpp"

namespace kf::test {
namespace {

// One context per Vulkan device with the per-dimension limit lowered to `groups` workgroups.
Context& limited_context(const DeviceRef& d, uint32_t groups) {
  auto& cache = context_cache();
  const std::string key = d.tag + "/max_groups=" + std::to_string(groups);
  auto it = cache.find(key);
  if (it == cache.end()) {
    ContextOptions o = options_for(d);
    o.tuning = "max_groups=" + std::to_string(groups);
    it = cache.emplace(key, Context::create(o)).first;
  }
  return it->second;
}

const TestCase& find_case(const OpDef& op, const std::string& label) {
  for (const auto& tc : op.tests)
    if (tc.label == label) return tc;
  throw Error(ErrorCode::InvalidArgument, op.name + " has no test case " + label);
}

// Attention's query and key tiles, one dispatch per tile (max_groups=1): causal GQA, packed sequences,
// the scores' key tiles and the backward's dK / dV and dQ passes, in f32 (and f16 for the first), against
// the reference. A kernel that ignored its
// first tile's offset would leave the other tiles unwritten (poisoned) and fail.
TEST(Limits, AttentionGridSplits) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"attention", "gqa_h6_kv2_sq17_sk33_d64"},
      {"attention", "s65_d64_causal_window16"},
      {"attention", "varlen_3seq_d64_causal"},
      {"attention_scores", "b2_h3_sq17_sk33_d64"},
      {"attention_backward", "gqa_h4_kv2_s33_d64_mix"},
      {"attention_backward", "varlen_3seq_d64"},
  };
  bool any = false;
  for (const auto& d : devices()) {
    if (d.backend != "vulkan") continue;
    for (uint32_t groups : {1u}) {
      Context& ctx = limited_context(d, groups);
      ValidationCheck vc(ctx);
      for (const auto& [name, label] : cases) {
        const OpDef& op = get_op(name);
        for (DType t : {DType::f32, DType::f16}) {
          if (!ctx.supports(name, t) || (t == DType::f16 && label != cases[0].second)) continue;
          check::CaseOptions o;
          o.check_validation = false;
          const check::CaseResult r = check::run_case(ctx, op, t, find_case(op, label), 5, o);
          EXPECT_FALSE(r.unsupported) << name << " " << label << " refused with max_groups=" << groups << ": " << r.message;
          EXPECT_TRUE(r.pass || r.unsupported) << name << " " << label << " " << to_string(t) << " with max_groups="
                                               << groups << " on " << d.name << " (variant " << r.variant << "):\n"
                                               << r.message;
          any = true;
        }
      }
    }
  }
  if (!any) GTEST_SKIP() << "no Vulkan device";
}

}  // namespace
}  // namespace kf::test
