// Links the installed kf and runs one op on the CPU backend: the package exports a usable target.
#include <kf/kf.hpp>

#include <cstdio>

int main() {
  kf::Context ctx = kf::Context::create(kf::ContextOptions{.backend = "cpu"});
  kf::Tensor a = ctx.from_host({3}, kf::DType::f32, {-1, 2, -3});
  kf::Tensor b = ctx.from_host({3}, kf::DType::f32, {0.5, 0.5, 0.5});
  std::vector<double> y = kf::add_relu(a, b).to_double();
  const bool ok = y == std::vector<double>{0, 2.5, 0};
  std::printf("installed kf on %s: add_relu %s\n", ctx.device().name.c_str(), ok ? "ok" : "WRONG");
  std::printf("backends compiled in:");
  for (const auto& n : kf::Context::backends()) std::printf(" %s", n.c_str());
  std::printf("\n");
  return ok ? 0 : 1;
}
