// libFuzzer target: the score-function parser and its GLSL generation (src/ops/score_mod.cpp). Any text
// either parses, or is refused with kf::Error (InvalidArgument); a parsed function evaluates, emits GLSL
// within the documented limit, and its canonical form parses again to the same canonical form.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kf/error.hpp"
#include "ops/score_mod.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  kf::ScoreMod f;
  try {
    f = kf::ScoreMod::parse("attention", text);
  } catch (const kf::Error& e) {
    if (e.code() != kf::ErrorCode::InvalidArgument) std::abort();
    return 0;
  }
  if (f.empty()) return 0;
  (void)f.uses_score();
  for (double s : {-3.5, 0.0, 1.0, 1e30})
    for (int64_t k : {0, 1, 7}) {
      (void)f.eval(s, k, k, k + 1, k);
      (void)f.grad(s, k, k, k + 1, k);
    }
  const std::string g = f.glsl(), dg = f.glsl_grad();
  if (g.empty() || dg.empty() || g.size() > 65536 || dg.size() > 65536) std::abort();
  // The canonical form is itself a valid function with the same canonical form, where it fits the limits.
  const std::string c = f.canonical();
  try {
    if (kf::ScoreMod::parse("attention", c).canonical() != c) std::abort();
  } catch (const kf::Error& e) {
    if (e.code() != kf::ErrorCode::InvalidArgument) std::abort();  // the canonical form may exceed the limits
  }
  return 0;
}
