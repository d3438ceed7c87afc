// The README's usage example: open the best device, run two fused ops, read the result back.
#include <kf/kf.hpp>

#include <cstdio>

int main() {
  kf::Context ctx = kf::Context::create();  // a GPU if there is one, else lavapipe, else the CPU
  std::printf("device: %s (%s)\n", ctx.device().name.c_str(), ctx.backend().c_str());

  kf::Tensor x = ctx.from_host({2, 4}, kf::DType::f32, {-2, -1, 0, 1, 2, 3, 4, 5});
  kf::Tensor bias = ctx.from_host({4}, kf::DType::f32, {0.5, 0.5, -0.5, -0.5});
  kf::Tensor h = kf::bias_gelu(x, bias);  // gelu(x + bias) in one kernel
  kf::Tensor p = kf::softmax(h);          // along the last dimension

  std::vector<float> out = p.to_float();
  for (int r = 0; r < 2; ++r) {
    for (int c = 0; c < 4; ++c) std::printf(" %.4f", out[r * 4 + c]);
    std::printf("\n");
  }
  return 0;
}
