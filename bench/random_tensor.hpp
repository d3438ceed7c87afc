// Random tensors for the benchmark tools (kf-lce-memory, kf-long-attention, kf-decode-step): uniform in [-1, 1) (or
// integers in [0, classes) for targets) from a splitmix64 of the element index and a salt, generated on
// the host in parallel and uploaded once.
#pragma once

#include <cmath>
#include <vector>

#include "kf/kf.hpp"
#include "ops/parallel.hpp"

namespace kf::bench {

// Uniform in offset + scale [-1, 1) (or, with classes > 0, integers in [0, classes)).
inline kf::Tensor random_tensor(kf::Context& ctx, const kf::Shape& s, kf::DType dtype, uint64_t salt, double classes = 0,
                                double scale = 1, double offset = 0) {
  kf::Tensor t = ctx.empty(s, dtype);
  std::vector<unsigned char> raw(t.nbytes());
  const size_t es = kf::dtype_size(dtype);
  kf::parallel_for(t.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      uint64_t z = static_cast<uint64_t>(i) + salt * 0x9E3779B97F4A7C15ull;  // splitmix64
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      const double u = static_cast<double>(z >> 11) * 0x1p-53;
      kf::store_element(dtype, raw.data() + i * es, classes > 0 ? std::floor(u * classes) : offset + scale * (2 * u - 1));
    }
  });
  t.upload(raw.data(), raw.size());
  return t;
}

}  // namespace kf::bench
