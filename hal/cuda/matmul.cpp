// linear and matmul (KERNELS.md section 4) on the CUDA backend, through cuBLASLt.
//
// cuBLASLt is loaded at run time (dlopen of libcublasLt.so.<major of the headers>), not linked: libkf
// must load on machines without CUDA (as the static CUDA runtime does, cmake/Cuda.cmake), the toolkit has
// no static cuBLASLt worth linking (libcublasLt.so is 540 MB; the static archive is larger still), and the
// library is on every machine that runs CUDA work: the CUDA toolkit's lib64, or PyTorch's wheels
// (nvidia/cu13/lib or nvidia/cublas/lib under site-packages). KF_CUBLASLT names the file to load first.
// Without it linear and matmul are reported unsupported, saying so.
//
// Row-major products as cuBLASLt's column-major ones: a row-major [R, C] buffer is the column-major
// C x R matrix, its transpose. linear: y^T (N x M) = op_T(W as K x N) x (x as K x M); matmul:
// y^T (N x M) = (b as N x K) x (a as K x M), batched with strides, or with the batches folded into M
// when b is shared ([K, N]). Accumulation in float (TF32 off: CUBLAS_COMPUTE_32F, so that f32 meets the
// f32 tolerance), double for f64; f16 and bf16 in and out with float accumulation.
//
// Epilogues: act(x W^T + bias) + residual.
//   - bias: cuBLASLt's BIAS epilogue (f32, f16, bf16, unbatched products);
//   - relu: the RELU(_BIAS) epilogue, exact; gelu_tanh: cuBLASLt's GELU(_BIAS) epilogue, which is the
//     tanh form, for f16 and bf16 only (its accuracy in f32 is not documented, and the f32 tolerance is
//     1e-5): f32 and f64 use the kernel below;
//   - residual with no activation: beta = 1 with C = residual (D = x W^T + bias + residual);
//   - everything else (erf gelu, silu, a residual after an activation, f64, batched products): the
//     product is written to y, then one elementwise kernel (train.cu) computes act(y + bias) + residual
//     in place. For 16-bit dtypes the product is then rounded to the dtype before the activation (one
//     extra rounding of 2^-11 / 2^-8, inside the f16 / bf16 tolerances).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

#if !defined(KF_HIP)
#include <cublasLt.h>
#include <dlfcn.h>
#include <glob.h>
#endif

namespace kf::hal::cuda {

#if defined(KF_HIP)

struct LtState {};

bool CudaDevice::matmul_supported(std::string* why) const {
  if (why) *why = "the HIP build has no matmul: hipBLASLt is not available (Debian 12 does not package it)";
  return false;
}

std::string CudaDevice::dispatch_matmul(const OpCall& call) {
  throw Error(ErrorCode::Unsupported, "hip: " + call.op->name + ": the HIP build has no matmul (no hipBLASLt)");
}

bool CudaDevice::lt_product(const std::string& op, DType, DType, bool, bool, int64_t, int64_t, int64_t, const void*,
                            int64_t, const void*, int64_t, void*, int64_t, bool) {
  throw Error(ErrorCode::Unsupported, "hip: " + op + ": the HIP build has no matmul (no hipBLASLt)");
}

#else

namespace {

#define KF_LT_FUNCS(X)                                                                                  \
  X(cublasLtCreate) X(cublasLtDestroy) X(cublasLtGetStatusName) X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy) X(cublasLtMatmulDescSetAttribute) X(cublasLtMatrixLayoutCreate)          \
  X(cublasLtMatrixLayoutDestroy) X(cublasLtMatrixLayoutSetAttribute) X(cublasLtMatmulPreferenceCreate)  \
  X(cublasLtMatmulPreferenceDestroy) X(cublasLtMatmulPreferenceSetAttribute)                            \
  X(cublasLtMatmulAlgoGetHeuristic) X(cublasLtMatmul) X(cublasLtGetVersion)

// The library's entry points, resolved once per process.
struct LtApi {
#define KF_LT_MEMBER(name) decltype(&::name) name = nullptr;
  KF_LT_FUNCS(KF_LT_MEMBER)
#undef KF_LT_MEMBER
  std::string path;   // the file loaded
  std::string error;  // why it is unavailable ("" when loaded)
};

std::string soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

// Candidates in order: $KF_CUBLASLT, the dynamic loader's search (LD_LIBRARY_PATH, ld.so.cache, a copy
// already loaded by the process, e.g. PyTorch's), the toolkit, PyTorch's wheels.
std::vector<std::string> candidates() {
  std::vector<std::string> c;
  if (const char* e = std::getenv("KF_CUBLASLT"); e && *e) c.push_back(e);
  const std::string so = soname();
  c.push_back(so);
  for (const char* env : {"CUDA_HOME", "CUDA_PATH"})
    if (const char* e = std::getenv(env); e && *e) c.push_back(std::string(e) + "/lib64/" + so);
  c.push_back("/usr/local/cuda/lib64/" + so);
  std::vector<std::string> patterns;
  for (const char* root : {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                           "/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages"}) {
    patterns.push_back(std::string(root) + "/nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + so);
    patterns.push_back(std::string(root) + "/nvidia/cublas/lib/" + so);
  }
  for (const char* env : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char* e = std::getenv(env); e && *e) {
      patterns.push_back(std::string(e) + "/lib/python3*/site-packages/nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) +
                         "/lib/" + so);
      patterns.push_back(std::string(e) + "/lib/python3*/site-packages/nvidia/cublas/lib/" + so);
    }
  if (const char* h = std::getenv("HOME"); h && *h) {
    patterns.push_back(std::string(h) + "/.local/lib/python3*/site-packages/nvidia/cu" +
                       std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + so);
    patterns.push_back(std::string(h) + "/.local/lib/python3*/site-packages/nvidia/cublas/lib/" + so);
  }
  for (const std::string& pat : patterns) {
    glob_t g{};
    if (::glob(pat.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) c.push_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return c;
}

const LtApi& lt_api() {
  static const LtApi api = [] {
    LtApi a;
    void* h = nullptr;
    std::string loader_error;
    for (const std::string& c : candidates()) {
      h = ::dlopen(c.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        a.path = c;
        break;
      }
      const char* e = ::dlerror();
      if (c == soname() && e) loader_error = e;
    }
    if (!h) {
      a.error = soname() + " was not found (looked in $KF_CUBLASLT, the loader's path, /usr/local/cuda/lib64 "
                           "and PyTorch's nvidia wheels" +
                (loader_error.empty() ? std::string() : "; " + loader_error) + "): install cuBLAS of CUDA " +
                std::to_string(CUBLAS_VER_MAJOR) + " or set KF_CUBLASLT to the file";
      return a;
    }
    bool ok = true;
#define KF_LT_RESOLVE(name)                                                        \
  a.name = reinterpret_cast<decltype(&::name)>(::dlsym(h, #name));                 \
  if (!a.name) {                                                                   \
    ok = false;                                                                    \
    if (a.error.empty()) a.error = a.path + " has no symbol " #name;               \
  }
    KF_LT_FUNCS(KF_LT_RESOLVE)
#undef KF_LT_RESOLVE
    if (!ok) return a;  // h stays open: harmless
    if (a.cublasLtGetVersion() / 10000 != CUBLAS_VER_MAJOR) {
      a.error = a.path + " is cuBLASLt " + std::to_string(a.cublasLtGetVersion()) + ", not of major version " +
                std::to_string(CUBLAS_VER_MAJOR);
    }
    return a;
  }();
  return api;
}

[[noreturn]] void lt_fail(const std::string& op, const char* what, cublasStatus_t st) {
  const LtApi& a = lt_api();
  const char* name = a.cublasLtGetStatusName ? a.cublasLtGetStatusName(st) : "?";
  const ErrorCode code = st == CUBLAS_STATUS_ALLOC_FAILED ? ErrorCode::OutOfMemory
                         : st == CUBLAS_STATUS_NOT_SUPPORTED ? ErrorCode::Unsupported
                         : st == CUBLAS_STATUS_EXECUTION_FAILED ? ErrorCode::DeviceLost
                                                                : ErrorCode::Device;
  throw Error(code, std::string(kBackend) + ": " + op + ": " + what + " failed: " + name + " (" +
                        std::to_string(static_cast<int>(st)) + ")");
}

// Owners of the cuBLASLt descriptors of one call.
struct Descs {
  const LtApi& a = lt_api();
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t A = nullptr, B = nullptr, C = nullptr, D = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descs() {
    if (pref) a.cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t l : {A, B, C, D})
      if (l) a.cublasLtMatrixLayoutDestroy(l);
    if (op) a.cublasLtMatmulDescDestroy(op);
  }
};

// The largest power of two (up to 256) dividing every value: the alignment cuBLASLt may assume.
uint32_t alignment_of(std::initializer_list<uint64_t> values) {
  uint32_t al = 256;
  for (uint64_t v : values)
    while (al > 1 && v % al != 0) al /= 2;
  return al;
}

}  // namespace

// Per device: the handle and the workspace.
struct LtState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<Buffer> workspace;
  size_t workspace_bytes = 0;
  ~LtState() {
    if (handle) lt_api().cublasLtDestroy(handle);
  }
};

bool CudaDevice::matmul_supported(std::string* why) const {
  const LtApi& a = lt_api();
  if (a.error.empty()) return true;
  if (why) *why = "cuBLASLt is unavailable: " + a.error;
  return false;
}

// The device's handle and workspace, created by the first product (one per device, shared by every
// caller: linear, matmul, linear_cross_entropy).
LtState& CudaDevice::lt_state(const std::string& op) {
  const LtApi& api = lt_api();
  if (!api.error.empty()) throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + op + ": cuBLASLt is unavailable: " + api.error);
  if (!lt_) {
    auto st = std::make_shared<LtState>();
    cublasStatus_t s = api.cublasLtCreate(&st->handle);
    if (s != CUBLAS_STATUS_SUCCESS) lt_fail(op, "cublasLtCreate", s);
    st->workspace_bytes = size_t(32) << 20;  // what NVIDIA recommends for Hopper
    st->workspace = allocate(st->workspace_bytes);
    lt_ = st;
  }
  return *lt_;
}

// A plain column-major product with the same preferences as dispatch_matmul (split-K only with partial
// sums in the compute type, the alignments of the actual pointers): D (m x n, ld ldd) = op(A) op(B), plus
// D itself when accumulate (beta = 1). A is stored k x m (ta) or m x k, B n x k (tb) or k x n. A and B in
// `in`, D in `out` (f16 / bf16 inputs may write a float D: compute and scale type float; f64: double).
// Returns false, running nothing, when cuBLASLt has no algorithm for the combination.
bool CudaDevice::lt_product(const std::string& op, DType in, DType out, bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd,
                            bool accumulate) {
  const LtApi& api = lt_api();
  make_current();
  LtState& lt = lt_state(op);
  const auto type_of = [&](DType t) {
    switch (t) {
      case DType::f32: return CUDA_R_32F;
      case DType::f16: return CUDA_R_16F;
      case DType::bf16: return CUDA_R_16BF;
      case DType::f64: return CUDA_R_64F;
      default: throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + op + ": no cuBLASLt product in " + to_string(t));
    }
  };
  const bool f64 = in == DType::f64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F, ti = type_of(in), to = type_of(out);
  Descs d;
  auto chk = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) lt_fail(op, what, s);
  };
  chk(api.cublasLtMatmulDescCreate(&d.op, compute, scale_type), "cublasLtMatmulDescCreate");
  const cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof(opa)), "set TRANSA");
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof(opb)), "set TRANSB");
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  chk(api.cublasLtMatrixLayoutCreate(&d.A, ti, ta ? u(k) : u(m), ta ? u(m) : u(k), lda), "cublasLtMatrixLayoutCreate A");
  chk(api.cublasLtMatrixLayoutCreate(&d.B, ti, tb ? u(n) : u(k), tb ? u(k) : u(n), ldb), "cublasLtMatrixLayoutCreate B");
  chk(api.cublasLtMatrixLayoutCreate(&d.C, to, u(m), u(n), ldd), "cublasLtMatrixLayoutCreate C");
  chk(api.cublasLtMatrixLayoutCreate(&d.D, to, u(m), u(n), ldd), "cublasLtMatrixLayoutCreate D");
  chk(api.cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = lt.workspace_bytes;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
      "set MAX_WORKSPACE_BYTES");
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                               sizeof(reduction)),
      "set REDUCTION_SCHEME_MASK");
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  const uint64_t ei = dtype_size(in), eo = dtype_size(out);
  const uint32_t al_a = alignment_of({addr(A), u(lda) * ei}), al_b = alignment_of({addr(B), u(ldb) * ei});
  const uint32_t al_d = alignment_of({addr(D), u(ldd) * eo});
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)), "set ALIGNMENT_A");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)), "set ALIGNMENT_B");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)), "set ALIGNMENT_C");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)), "set ALIGNMENT_D");
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t hs = api.cublasLtMatmulAlgoGetHeuristic(lt.handle, d.op, d.A, d.B, d.C, d.D, d.pref, 1, &result, &found);
  // No algorithm, or a type combination this cuBLASLt rejects: the caller decides (fallback or Unsupported).
  if (hs == CUBLAS_STATUS_NOT_SUPPORTED || hs == CUBLAS_STATUS_INVALID_VALUE || (hs == CUBLAS_STATUS_SUCCESS && found == 0))
    return false;
  chk(hs, "cublasLtMatmulAlgoGetHeuristic");
  const float alpha_f = 1, beta_f = accumulate ? 1.f : 0.f;
  const double alpha_d = 1, beta_d = accumulate ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  chk(api.cublasLtMatmul(lt.handle, d.op, alpha, A, d.A, B, d.B, beta, D, d.C, D, d.D, &result.algo,
                         ptr_of(lt.workspace), lt.workspace_bytes, static_cast<cudaStream_t>(stream_)),
      "cublasLtMatmul");
  return true;
}

std::string CudaDevice::dispatch_matmul(const OpCall& call) {
  const OpDef& op = *call.op;
  const LtApi& api = lt_api();
  if (!api.error.empty()) throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + op.name + ": cuBLASLt is unavailable: " + api.error);
  const bool dropout = op.name == "linear_dropout" && call.attrs.p > 0;
  const bool is_linear = op.name == "linear" || op.name == "linear_dropout";
  const TensorArg& a = call.inputs[0];
  const TensorArg& b = call.inputs[1];
  const TensorArg* bias = call.inputs.size() > 2 && call.inputs[2].buffer ? &call.inputs[2] : nullptr;
  const TensorArg* res = call.inputs.size() > 3 && call.inputs[3].buffer ? &call.inputs[3] : nullptr;
  const TensorArg& y = call.outputs[0];
  const int act = static_cast<int>(call.attrs.act);
  const std::string prefix = std::string(kBackend) + ":";
  if (y.numel == 0) return prefix + "cublaslt/empty";

  // Shapes (checked by the registry): M rows of the output per batch, N columns, K the inner dimension.
  int64_t M, N, K, batches = 1;
  bool trans_a;
  if (is_linear) {
    K = b.shape[1], N = b.shape[0], M = a.numel / K;
    trans_a = true;
  } else {
    K = a.shape.back(), N = b.shape.back();
    M = a.shape[a.shape.size() - 2];
    const int64_t nb = a.numel / (M * K);
    if (b.shape.size() > 2) batches = nb;  // b batched: strided batches
    else M *= nb;                          // b shared: the batches folded into the rows
    trans_a = false;
  }

  cudaDataType_t type;
  cublasComputeType_t compute;
  cudaDataType_t scale_type;
  switch (call.dtype) {
    case DType::f32: type = CUDA_R_32F, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    case DType::f16: type = CUDA_R_16F, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    case DType::bf16: type = CUDA_R_16BF, compute = CUBLAS_COMPUTE_32F, scale_type = CUDA_R_32F; break;
    case DType::f64: type = CUDA_R_64F, compute = CUBLAS_COMPUTE_64F, scale_type = CUDA_R_64F; break;
    default: throw Error(ErrorCode::Unsupported, prefix + " " + op.name + ": no cuBLASLt product in " + to_string(call.dtype));
  }
  const bool f64 = call.dtype == DType::f64, half = call.dtype == DType::f16 || call.dtype == DType::bf16;

  // Which parts of the epilogue cuBLASLt fuses; the rest goes to the epilogue kernel.
  const bool unbatched = batches == 1;
  const bool lt_bias = bias && unbatched && !f64 && lt_epilogues_;
  const bool lt_act = unbatched && !f64 && !res && lt_epilogues_ && (act == kActRelu || (act == kActGeluTanh && half));
  // beta = 1, C = residual; not under dropout, which comes before the residual
  const bool lt_res = res && (act == kActNone) && !dropout && lt_epilogues_;
  cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (lt_act && act == kActRelu) epi = lt_bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
  else if (lt_act) epi = lt_bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU;
  else if (lt_bias) epi = CUBLASLT_EPILOGUE_BIAS;
  EpilogueParams ep;
  ep.y = ptr_of(y.buffer);
  ep.bias = bias && !lt_bias ? ptr_of(bias->buffer) : nullptr;
  ep.res = res && !lt_res ? ptr_of(res->buffer) : nullptr;
  ep.act = lt_act ? static_cast<int>(kActNone) : act;
  ep.total = y.numel;
  ep.n = N;
  if (dropout) {
    ep.seed_lo = static_cast<uint32_t>(call.attrs.seed);
    ep.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
    ep.off_lo = static_cast<uint32_t>(call.attrs.offset);
    ep.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
    ep.thr = ref::dropout_threshold(call.attrs.p);
    ep.keep_scale = 1.0 / (1.0 - call.attrs.p);
  }
  bool own_epilogue = ep.bias || ep.res || ep.act != kActNone || ep.thr != 0u;

  make_current();
  lt_state(op.name);

  Descs d;
  auto chk = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) lt_fail(op.name, what, s);
  };
  chk(api.cublasLtMatmulDescCreate(&d.op, compute, scale_type), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = CUBLAS_OP_N;
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
  if (lt_bias) {
    const void* bp = ptr_of(bias->buffer);
    chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)), "set BIAS_POINTER");
  }

  // Column-major layouts: A (the weight / b), B (x / a), C and D (y^T: N x M, ld N).
  const uint64_t es = dtype_size(call.dtype);
  if (trans_a) chk(api.cublasLtMatrixLayoutCreate(&d.A, type, K, N, K), "cublasLtMatrixLayoutCreate A");
  else chk(api.cublasLtMatrixLayoutCreate(&d.A, type, N, K, N), "cublasLtMatrixLayoutCreate A");
  chk(api.cublasLtMatrixLayoutCreate(&d.B, type, K, M, K), "cublasLtMatrixLayoutCreate B");
  chk(api.cublasLtMatrixLayoutCreate(&d.C, type, N, M, N), "cublasLtMatrixLayoutCreate C");
  chk(api.cublasLtMatrixLayoutCreate(&d.D, type, N, M, N), "cublasLtMatrixLayoutCreate D");
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  if (batches > 1) {
    const int32_t count = static_cast<int32_t>(batches);
    stride_a = K * N, stride_b = M * K, stride_c = M * N;
    for (auto [l, stride] : {std::pair{d.A, stride_a}, std::pair{d.B, stride_b}, std::pair{d.C, stride_c},
                             std::pair{d.D, stride_c}}) {
      chk(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "set BATCH_COUNT");
      chk(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
          "set STRIDED_BATCH_OFFSET");
    }
  }

  const void* A = ptr_of(b.buffer);
  const void* B = ptr_of(a.buffer);
  void* D = ptr_of(y.buffer);
  const void* C = lt_res ? ptr_of(res->buffer) : D;

  chk(api.cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = lt_->workspace_bytes;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
      "set MAX_WORKSPACE_BYTES");
  // Split-K only with its partial sums in the compute type, reduced in a separate step: not in the
  // output type (f16 / bf16 partial sums would lose the float accumulation) nor in place.
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                               sizeof(reduction)),
      "set REDUCTION_SCHEME_MASK");
  // The alignments that hold for every batch's matrices (base addresses and batch strides in bytes).
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  const uint32_t al_a = alignment_of({addr(A), uint64_t(stride_a) * es});
  const uint32_t al_b = alignment_of({addr(B), uint64_t(stride_b) * es});
  const uint32_t al_c = alignment_of({addr(C), uint64_t(stride_c) * es});
  const uint32_t al_d = alignment_of({addr(D), uint64_t(stride_c) * es});
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)), "set ALIGNMENT_A");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)), "set ALIGNMENT_B");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)), "set ALIGNMENT_C");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)), "set ALIGNMENT_D");

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  chk(api.cublasLtMatmulAlgoGetHeuristic(lt_->handle, d.op, d.A, d.B, d.C, d.D, d.pref, 1, &result, &found),
      "cublasLtMatmulAlgoGetHeuristic");
  if (found == 0 && epi != CUBLASLT_EPILOGUE_DEFAULT) {
    // No algorithm with the fused epilogue for this shape: the plain product, and the epilogue kernel
    // does bias and activation (the residual stays in beta = 1 where it was).
    epi = CUBLASLT_EPILOGUE_DEFAULT;
    chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
    ep.bias = bias ? ptr_of(bias->buffer) : nullptr;
    ep.act = act;
    own_epilogue = ep.bias || ep.res || ep.act != kActNone || ep.thr != 0u;
    chk(api.cublasLtMatmulAlgoGetHeuristic(lt_->handle, d.op, d.A, d.B, d.C, d.D, d.pref, 1, &result, &found),
        "cublasLtMatmulAlgoGetHeuristic");
  }
  if (found == 0)
    throw Error(ErrorCode::Unsupported, prefix + " " + op.name + ": cuBLASLt has no algorithm for " + to_string(call.dtype) +
                                            " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                                            std::to_string(K) + " batches=" + std::to_string(batches));

  const float alpha_f = 1, beta_f = lt_res ? 1.f : 0.f;
  const double alpha_d = 1, beta_d = lt_res ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  chk(api.cublasLtMatmul(lt_->handle, d.op, alpha, A, d.A, B, d.B, beta, C, d.C, D, d.D, &result.algo,
                         ptr_of(lt_->workspace), lt_->workspace_bytes, static_cast<cudaStream_t>(stream_)),
      "cublasLtMatmul");

  std::string variant = prefix + "cublaslt";
  if (epi != CUBLASLT_EPILOGUE_DEFAULT)
    variant += epi == CUBLASLT_EPILOGUE_BIAS ? "+bias" : epi == CUBLASLT_EPILOGUE_RELU ? "+relu" : epi == CUBLASLT_EPILOGUE_RELU_BIAS ? "+relu_bias" : epi == CUBLASLT_EPILOGUE_GELU ? "+gelu_tanh" : "+gelu_tanh_bias";
  if (lt_res) variant += "+residual(beta=1)";
  if (batches > 1) variant += ",batched";
  if (own_epilogue) {
    Dt dt = Dt::f32;
    switch (call.dtype) {
      case DType::f16: dt = Dt::f16; break;
      case DType::bf16: dt = Dt::bf16; break;
      case DType::f64: dt = Dt::f64; break;
      default: break;
    }
    const int64_t blocks = std::clamp<int64_t>((y.numel + 255) / 256, 1, int64_t(sm_count_) * 32);
    check_launch(launch_epilogue(dt, ep, static_cast<uint32_t>(blocks), stream_), "epilogue " + op.name);
    variant += "+epilogue-kernel";
  }
  return variant;
}

#endif

}  // namespace kf::hal::cuda
