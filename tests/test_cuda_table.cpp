// The CUDA (or HIP) backend's kernel table against the registry: each op with a kernel reads the inputs the
// registry declares, in order, in the dtypes it declares, and draws dropout bits exactly where the op is
// random. The backend trusts its table (it reads no registry), so a registry change that the table did
// not follow is caught here, with no GPU needed.
#include <gtest/gtest.h>

#include <string>

#include "hal/cuda/op_table.hpp"
#include "ops/registry.hpp"

namespace kf {
namespace {

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

TEST(CudaKernelTable, MatchesTheRegistry) {
  int with_kernel = 0;
  for (const OpDef& op : registry()) {
    const hal::cuda::KernelSignature k = hal::cuda::kernel_signature(op.id);
    if (!k.present) continue;  // composed ops (ffn) and ops without a CUDA kernel yet
    ++with_kernel;
    SCOPED_TRACE(op.name);
    EXPECT_EQ(k.family, op.family);
    EXPECT_EQ(std::string(k.inputs), joined(op.inputs));
    EXPECT_EQ(k.random, op.random);
    for (DType dt : op.dtypes)
      for (size_t i = 0; i < op.inputs.size(); ++i) {
        const DType want = (k.i32_inputs >> i) & 1 ? DType::i32 : dt;
        EXPECT_EQ(op.input_dtype(i, dt, Attrs{}), want) << "input " << op.inputs[i] << " in " << to_string(dt);
      }
  }
  EXPECT_GT(with_kernel, 60);
}

}  // namespace
}  // namespace kf
