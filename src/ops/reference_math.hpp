// Float64 reference math shared by the references and the CPU backend: activations (docs/ops.md) and
// the Philox4x32-10 generator that every backend reproduces bit for bit.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>

#include "plan/dropout.hpp"

namespace kf::ref {

inline double relu(double x) { return x < 0 ? 0.0 : x; }  // NaN stays NaN
inline double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
inline double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / M_PI);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}
inline double silu(double x) { return x * sigmoid(x); }
inline double softplus(double x) { return x > 20 ? x : std::log1p(std::exp(x)); }
inline double mish(double x) { return x * std::tanh(softplus(x)); }
inline double prelu(double x, double a) { return x >= 0 ? x : a * x; }

// Philox4x32-10 (Salmon et al. 2011).
inline std::array<uint32_t, 4> philox4x32_10(std::array<uint32_t, 4> c, std::array<uint32_t, 2> k) {
  constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  for (int r = 0; r < 10; ++r) {
    const uint64_t p0 = uint64_t(M0) * c[0], p1 = uint64_t(M1) * c[2];
    const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
    c = {hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0};
    k[0] += W0;
    k[1] += W1;
  }
  return c;
}

using plan::dropout_threshold;  // src/plan/dropout.hpp, shared with the backends

inline uint32_t philox_word(uint64_t i, uint64_t seed, uint64_t offset) {
  const uint64_t blk = i >> 2;
  auto out = philox4x32_10({uint32_t(blk), uint32_t(blk >> 32), uint32_t(offset), uint32_t(offset >> 32)},
                           {uint32_t(seed), uint32_t(seed >> 32)});
  return out[i & 3];
}

inline bool dropout_keep(uint64_t i, uint64_t seed, uint64_t offset, uint32_t threshold) {
  return (philox_word(i, seed, offset) >> 8) >= threshold;
}

}  // namespace kf::ref
