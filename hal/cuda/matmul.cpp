// linear and matmul (docs/ops.md section 4) on the CUDA backend, through cuBLASLt.
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
// Epilogues: act(x W^T + bias) + residual (Attrs::out_dtype, another output dtype than the inputs': see
// dispatch_matmul_out_dtype).
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
#include <map>
#include <mutex>
#include <string>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"
#include "plan/dropout.hpp"

#include <optional>

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
  throw Error(ErrorCode::Unsupported, "hip: " + std::string(op_name(call.id)) + ": the HIP build has no matmul (no hipBLASLt)");
}

std::string CudaDevice::dispatch_matmul_out_dtype(const OpCall& call, DType, bool, int64_t, int64_t, int64_t, int64_t) {
  throw Error(ErrorCode::Unsupported, "hip: " + std::string(op_name(call.id)) + ": the HIP build has no matmul (no hipBLASLt)");
}

void CudaDevice::conv_gemm(const ConvGemm&, const std::string& op) {
  throw Error(ErrorCode::Unsupported, "hip: " + op + ": the HIP build has no matmul (no hipBLASLt)");
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
// already loaded by the process, e.g. PyTorch's), the toolkit, PyTorch's wheels. The environment's
// part comes in DeviceOptions (the core reads it).
std::vector<std::string> candidates(const DeviceOptions& o) {
  std::vector<std::string> c;
  if (!o.cublaslt.empty()) c.push_back(o.cublaslt);
  const std::string so = soname();
  c.push_back(so);
  for (const std::string& root : o.cuda_roots) c.push_back(root + "/lib64/" + so);
  c.push_back("/usr/local/cuda/lib64/" + so);
  std::vector<std::string> patterns;
  for (const char* root : {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
                           "/usr/lib/python3/dist-packages", "/opt/conda/lib/python3*/site-packages"}) {
    patterns.push_back(std::string(root) + "/nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + so);
    patterns.push_back(std::string(root) + "/nvidia/cublas/lib/" + so);
  }
  for (const std::string& e : o.python_prefixes) {
    patterns.push_back(e + "/lib/python3*/site-packages/nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + so);
    patterns.push_back(e + "/lib/python3*/site-packages/nvidia/cublas/lib/" + so);
  }
  if (const std::string& h = o.home; !h.empty()) {
    patterns.push_back(h + "/.local/lib/python3*/site-packages/nvidia/cu" + std::to_string(CUBLAS_VER_MAJOR) + "/lib/" + so);
    patterns.push_back(h + "/.local/lib/python3*/site-packages/nvidia/cublas/lib/" + so);
  }
  for (const std::string& pat : patterns) {
    glob_t g{};
    if (::glob(pat.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) c.push_back(g.gl_pathv[i]);
    ::globfree(&g);
  }
  return c;
}

// Loaded once per process, by the first call: the devices' matmul_supported and lt_state pass their
// options (the search paths); the calls made after a product was set up pass none.
const LtApi& lt_api(const DeviceOptions* options = nullptr) {
  static const LtApi api = [options] {
    LtApi a;
    void* h = nullptr;
    std::string loader_error;
    for (const std::string& c : candidates(options ? *options : DeviceOptions{})) {
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

// The algorithm chosen for one product description (LtState::chosen).
struct LtChoice {
  cublasLtMatmulAlgo_t algo{};
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;  // the one it runs (DEFAULT: the caller's kernel's part)
  bool found = false;
};

// Per device: the handle, the workspace, and the algorithm chosen for each product description met so
// far (the heuristic query costs tens of microseconds of host time per call, as long as a 4096^3 f16
// product runs on an H100, so it runs once per description).
struct LtState {
  cublasLtHandle_t handle = nullptr;
  std::shared_ptr<Buffer> workspace;
  size_t workspace_bytes = 0;
  std::map<std::string, LtChoice> chosen;
  ~LtState() {
    if (handle) lt_api().cublasLtDestroy(handle);
  }
};

// One product through cuBLASLt, column-major: D (m x n, ld ldd) = op(A) op(B) (+ C when beta_one), with
// A of k x m (trans_a) or m x k, ld lda, and B of n x k (trans_b) or k x n, ld ldb; `batches` strided
// batches (strides in elements; a stride of 0 gives every batch the same matrix, which cuBLASLt allows:
// the convolutions' weights). Float accumulation (TF32 off), double for f64. C and D in out_dtype when
// set (f16 / bf16 inputs may write a float D: linear_cross_entropy's d W), else in dtype. soft_fail:
// no algorithm (or a type combination cuBLASLt rejects) returns -1 instead of raising.
struct LtProduct {
  DType dtype = DType::f32;
  std::optional<DType> out_dtype;
  bool trans_a = false, trans_b = false, soft_fail = false;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldd = 0;
  int64_t batches = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  const void* C = nullptr;  // read when beta_one (the residual); else D
  void* D = nullptr;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;  // the BIAS epilogues' vector (m values)
  bool beta_one = false;
};

bool CudaDevice::matmul_supported(std::string* why) const {
  const LtApi& a = lt_api(&options_);
  if (a.error.empty()) return true;
  if (why) *why = "cuBLASLt is unavailable: " + a.error;
  return false;
}

// The device's handle and workspace, created by the first product (one per device, shared by every
// caller: linear, matmul, the convolutions, linear_cross_entropy).
LtState& CudaDevice::lt_state(const std::string& op) {
  const LtApi& api = lt_api(&options_);
  if (!api.error.empty())
    throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + op + ": cuBLASLt is unavailable: " + api.error);
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

// Runs g (LtProduct above) on the device's one cuBLASLt handle and workspace. Returns the epilogue that
// ran: g.epilogue, or CUBLASLT_EPILOGUE_DEFAULT when cuBLASLt has no algorithm with it for this shape
// (the caller's epilogue kernel then does its part); -1 with g.soft_fail when it has none at all.
int CudaDevice::lt_run(const LtProduct& g, const std::string& opname) {
  const LtApi& api = lt_api(&options_);
  const std::string prefix = std::string(kBackend) + ":";
  const auto type_of = [&](DType t) {
    switch (t) {
      case DType::f32: return CUDA_R_32F;
      case DType::f16: return CUDA_R_16F;
      case DType::bf16: return CUDA_R_16BF;
      case DType::f64: return CUDA_R_64F;
      default: throw Error(ErrorCode::Unsupported, prefix + " " + opname + ": no cuBLASLt product in " + to_string(t));
    }
  };
  const DType out = g.out_dtype.value_or(g.dtype);
  const cudaDataType_t type = type_of(g.dtype), out_type = type_of(out);
  const bool f64 = g.dtype == DType::f64;
  const cublasComputeType_t compute = f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F;
  const cudaDataType_t scale_type = f64 ? CUDA_R_64F : CUDA_R_32F;

  make_current();
  LtState& lt = lt_state(opname);

  Descs d;
  auto chk = [&](cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) lt_fail(opname, what, s);
  };
  cublasLtEpilogue_t epi = g.epilogue;
  chk(api.cublasLtMatmulDescCreate(&d.op, compute, scale_type), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "set TRANSA");
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "set TRANSB");
  chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
  if (g.bias) {
    const void* bp = g.bias;
    chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bp, sizeof(bp)), "set BIAS_POINTER");
  }

  const uint64_t es = dtype_size(g.dtype), eo = dtype_size(out);
  if (g.trans_a) chk(api.cublasLtMatrixLayoutCreate(&d.A, type, g.k, g.m, g.lda), "cublasLtMatrixLayoutCreate A");
  else chk(api.cublasLtMatrixLayoutCreate(&d.A, type, g.m, g.k, g.lda), "cublasLtMatrixLayoutCreate A");
  if (g.trans_b) chk(api.cublasLtMatrixLayoutCreate(&d.B, type, g.n, g.k, g.ldb), "cublasLtMatrixLayoutCreate B");
  else chk(api.cublasLtMatrixLayoutCreate(&d.B, type, g.k, g.n, g.ldb), "cublasLtMatrixLayoutCreate B");
  chk(api.cublasLtMatrixLayoutCreate(&d.C, out_type, g.m, g.n, g.ldd), "cublasLtMatrixLayoutCreate C");
  chk(api.cublasLtMatrixLayoutCreate(&d.D, out_type, g.m, g.n, g.ldd), "cublasLtMatrixLayoutCreate D");
  if (g.batches > 1) {
    const int32_t count = static_cast<int32_t>(g.batches);
    for (auto [l, stride] : {std::pair{d.A, g.stride_a}, std::pair{d.B, g.stride_b}, std::pair{d.C, g.stride_d},
                             std::pair{d.D, g.stride_d}}) {
      chk(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
          "set BATCH_COUNT");
      chk(api.cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)),
          "set STRIDED_BATCH_OFFSET");
    }
  }

  chk(api.cublasLtMatmulPreferenceCreate(&d.pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = lt.workspace_bytes;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)),
      "set MAX_WORKSPACE_BYTES");
  // Split-K only with its partial sums in the compute type, reduced in a separate step: not in the
  // output type (f16 / bf16 partial sums would lose the float accumulation) nor in place.
  const uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
                                               sizeof(reduction)),
      "set REDUCTION_SCHEME_MASK");
  // The alignments that hold for every batch's matrices and columns (base addresses, batch strides and
  // leading dimensions in bytes).
  auto addr = [](const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); };
  const uint32_t al_a = alignment_of({addr(g.A), uint64_t(g.stride_a) * es, uint64_t(g.lda) * es});
  const uint32_t al_b = alignment_of({addr(g.B), uint64_t(g.stride_b) * es, uint64_t(g.ldb) * es});
  const uint32_t al_c = alignment_of({addr(g.C), uint64_t(g.stride_d) * eo, uint64_t(g.ldd) * eo});
  const uint32_t al_d = alignment_of({addr(g.D), uint64_t(g.stride_d) * eo, uint64_t(g.ldd) * eo});
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)), "set ALIGNMENT_A");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)), "set ALIGNMENT_B");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)), "set ALIGNMENT_C");
  chk(api.cublasLtMatmulPreferenceSetAttribute(d.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)), "set ALIGNMENT_D");

  // The description's key: everything the descriptors and preferences above hold but the pointers' values.
  const std::string key = std::to_string(int(g.dtype)) + "," + std::to_string(int(out)) + "," +
                          std::to_string(g.trans_a) + std::to_string(g.trans_b) + std::to_string(g.beta_one) +
                          std::to_string(g.bias != nullptr) + "," + std::to_string(int(g.epilogue)) + "," +
                          std::to_string(g.m) + "," + std::to_string(g.n) + "," + std::to_string(g.k) + "," +
                          std::to_string(g.lda) + "," + std::to_string(g.ldb) + "," + std::to_string(g.ldd) + "," +
                          std::to_string(g.batches) + "," + std::to_string(g.stride_a) + "," +
                          std::to_string(g.stride_b) + "," + std::to_string(g.stride_d) + "," + std::to_string(al_a) +
                          "," + std::to_string(al_b) + "," + std::to_string(al_c) + "," + std::to_string(al_d);
  const float alpha_f = 1, beta_f = g.beta_one ? 1.f : 0.f;
  const double alpha_d = 1, beta_d = g.beta_one ? 1.0 : 0.0;
  const void* alpha = f64 ? static_cast<const void*>(&alpha_d) : static_cast<const void*>(&alpha_f);
  const void* beta = f64 ? static_cast<const void*>(&beta_d) : static_cast<const void*>(&beta_f);
  const auto matmul = [&](const cublasLtMatmulAlgo_t& algo) {
    return api.cublasLtMatmul(lt.handle, d.op, alpha, g.A, d.A, g.B, d.B, beta, g.C, d.C, g.D, d.D, &algo,
                              ptr_of(lt.workspace), lt.workspace_bytes, static_cast<cudaStream_t>(stream_));
  };

  auto it = lt.chosen.find(key);
  if (it == lt.chosen.end()) {
    // The heuristic's first algorithm. (Timing its first 16 on the operands and keeping the fastest was
    // measured on an H100 and was no faster.)
    // KF_TUNE mm_algo=N takes the N-th answer instead (the last one where it gives fewer), to compare them.
    cublasLtMatmulHeuristicResult_t results[32]{};
    const int wanted = std::max(1, mm_algo_);
    int found = 0;
    const cublasStatus_t hs =
        api.cublasLtMatmulAlgoGetHeuristic(lt.handle, d.op, d.A, d.B, d.C, d.D, d.pref, wanted, results, &found);
    // A type combination this cuBLASLt rejects (float D from 16-bit inputs, say): the caller's fallback.
    if (g.soft_fail && (hs == CUBLAS_STATUS_NOT_SUPPORTED || hs == CUBLAS_STATUS_INVALID_VALUE)) return -1;
    chk(hs, "cublasLtMatmulAlgoGetHeuristic");
    if (found == 0 && epi != CUBLASLT_EPILOGUE_DEFAULT) {
      // No algorithm with the fused epilogue for this shape: the plain product (the caller's kernel does
      // the epilogue).
      epi = CUBLASLT_EPILOGUE_DEFAULT;
      chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
      chk(api.cublasLtMatmulAlgoGetHeuristic(lt.handle, d.op, d.A, d.B, d.C, d.D, d.pref, wanted, results, &found),
          "cublasLtMatmulAlgoGetHeuristic");
    }
    LtChoice c;
    c.epilogue = epi;
    c.found = found > 0;
    if (found > 0) c.algo = results[std::min(found, wanted) - 1].algo;
    it = lt.chosen.emplace(key, c).first;
  } else if (it->second.epilogue != epi) {
    epi = it->second.epilogue;
    chk(api.cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)), "set EPILOGUE");
  }
  const LtChoice& c = it->second;
  if (!c.found && g.soft_fail) return -1;
  if (!c.found)
    throw Error(ErrorCode::Unsupported, prefix + " " + opname + ": cuBLASLt has no algorithm for " + to_string(g.dtype) +
                                            " (column-major m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) +
                                            " k=" + std::to_string(g.k) + " batches=" + std::to_string(g.batches) + ")");
  chk(matmul(c.algo), "cublasLtMatmul");
  return static_cast<int>(epi);
}

// The convolutions' product (kernels.cpp dispatch_conv): for image i, y_i [O, P] = W [O, K] col_i [K, P]
// (row-major), as the column-major D (P x O, ld P) = col_i (P x K, ld P) W^T (K x O, ld K): one call,
// the images as strided batches, W's batch stride 0; plain (the epilogue kernel adds the rest: a
// per-channel bias is per column here, which cuBLASLt's BIAS epilogue, per row, cannot take).
void CudaDevice::conv_gemm(const ConvGemm& c, const std::string& opname) {
  LtProduct g;
  g.dtype = c.dtype;
  g.trans_a = false;
  g.m = c.P, g.n = c.O, g.k = c.K;
  g.lda = c.P, g.ldb = c.K, g.ldd = c.P;
  g.A = c.col, g.B = c.w, g.D = c.y, g.C = c.y;
  g.batches = c.images, g.stride_a = c.col_step, g.stride_b = 0, g.stride_d = c.y_step;
  (void)lt_run(g, opname);
}

// A plain column-major product on lt_run (linear_cross_entropy, lce.cpp): D (m x n, ld ldd) = op(A) op(B),
// plus D itself when accumulate (beta = 1). A is stored k x m (ta) or m x k, B n x k (tb) or k x n; A and
// B in `in`, D in `out`. Returns false, running nothing, when cuBLASLt has no algorithm for it.
bool CudaDevice::lt_product(const std::string& op, DType in, DType out, bool ta, bool tb, int64_t m, int64_t n,
                            int64_t k, const void* A, int64_t lda, const void* B, int64_t ldb, void* D, int64_t ldd,
                            bool accumulate) {
  LtProduct g;
  g.dtype = in;
  g.out_dtype = out;
  g.trans_a = ta, g.trans_b = tb, g.soft_fail = true;
  g.m = m, g.n = n, g.k = k, g.lda = lda, g.ldb = ldb, g.ldd = ldd;
  g.A = A, g.B = B, g.C = D, g.D = D;
  g.beta_one = accumulate;
  return lt_run(g, op) >= 0;
}

namespace {

// The product of linear / matmul as cuBLASLt's column-major one: y^T (N x M) = op(W or b) (x or a)^T, D at `d`.
LtProduct product_of(const OpCall& call, bool trans_a, int64_t M, int64_t N, int64_t K, int64_t batches, void* d) {
  LtProduct g;
  g.dtype = call.dtype;
  g.trans_a = trans_a;
  g.m = N, g.n = M, g.k = K;
  g.lda = trans_a ? K : N, g.ldb = K, g.ldd = N;
  g.batches = batches;
  if (batches > 1) g.stride_a = K * N, g.stride_b = M * K, g.stride_d = M * N;
  g.A = ptr_of(call.inputs[1]);
  g.B = ptr_of(call.inputs[0]);
  g.C = g.D = d;
  return g;
}

// linear_dropout's dropout in the epilogue (none for p = 0 and the other ops).
void set_dropout(EpilogueParams& ep, const OpCall& call) {
  if (call.id != OpId::linear_dropout || call.attrs.p <= 0) return;
  ep.seed_lo = static_cast<uint32_t>(call.attrs.seed);
  ep.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
  ep.off_lo = static_cast<uint32_t>(call.attrs.offset);
  ep.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
  ep.thr = plan::dropout_threshold(call.attrs.p);
  ep.keep_scale = 1.0 / (1.0 - call.attrs.p);
}

}  // namespace

// Attrs::out_dtype (another output dtype than the inputs'; f32, f16 and bf16): the product with an f32 D
// (cuBLASLt: f32 or 16-bit A and B, f32 accumulation) into y itself when y is f32, else into a scratch
// buffer; then the epilogue kernel in f32 on it (bias converted to f32 first, activation, dropout, and the
// residual when y is f32); for a 16-bit y the conversion kernel adds the residual and rounds once, to y.
// cuBLASLt's fused epilogues are left out: their bias would have to be in the output's type.
std::string CudaDevice::dispatch_matmul_out_dtype(const OpCall& call, DType odt, bool trans_a, int64_t M, int64_t N,
                                                  int64_t K, int64_t batches) {
  const std::string name = op_name(call.id);
  const std::string prefix = std::string(kBackend) + ":";
  Dt in_dt = Dt::f32, out_dt = Dt::f32;  // (f32, f16 and bf16 only: supports())
  dt_of(call.dtype, &in_dt);
  dt_of(odt, &out_dt);
  const TensorArg* bias = call.inputs.size() > 2 && call.inputs[2].buffer ? &call.inputs[2] : nullptr;
  const TensorArg* res = call.inputs.size() > 3 && call.inputs[3].buffer ? &call.inputs[3] : nullptr;
  const TensorArg& y = call.outputs[0];
  const bool direct = odt == DType::f32;
  std::shared_ptr<Buffer> acc = direct ? nullptr : scratch(static_cast<size_t>(y.numel) * 4);
  void* acc_p = direct ? ptr_of(y) : ptr_of(acc);
  const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((y.numel + 255) / 256, 1, int64_t(sm_count_) * 32));
  make_current();

  LtProduct g = product_of(call, trans_a, M, N, K, batches, acc_p);
  g.out_dtype = DType::f32;
  g.soft_fail = true;
  if (lt_run(g, name) < 0)
    throw Error(ErrorCode::Unsupported, prefix + " " + name + ": cuBLASLt has no f32-output product of " +
                                            to_string(call.dtype) + " inputs for this shape");

  std::shared_ptr<Buffer> bias32;
  if (bias) {
    bias32 = scratch(static_cast<size_t>(N) * 4);
    ConvertParams cb;
    cb.src = ptr_of(*bias);
    cb.dst = ptr_of(bias32);
    cb.n = N;
    check_launch(launch_convert(in_dt, Dt::f32, cb, static_cast<uint32_t>((N + 255) / 256), stream_), "bias to f32 " + name);
  }
  EpilogueParams ep;
  ep.y = acc_p;
  ep.bias = bias32 ? ptr_of(bias32) : nullptr;
  ep.res = res && direct ? ptr_of(*res) : nullptr;
  ep.act = static_cast<int>(call.attrs.act);
  ep.total = y.numel;
  ep.n = N;
  set_dropout(ep, call);
  std::string variant = prefix + "cublaslt,f32-product" + (batches > 1 ? ",batched" : "");
  if (ep.bias || ep.res || ep.act != kActNone || ep.thr != 0u) {
    check_launch(launch_epilogue(Dt::f32, ep, blocks, stream_), "epilogue " + name);
    variant += "+epilogue-kernel";
  }
  if (!direct) {
    ConvertParams cv;
    cv.src = acc_p;
    cv.add = res ? ptr_of(*res) : nullptr;
    cv.dst = ptr_of(y);
    cv.n = y.numel;
    check_launch(launch_convert(Dt::f32, out_dt, cv, blocks, stream_), "convert " + name);
    variant += "+convert";
  }
  return variant + ",out-" + to_string(odt);
}

std::string CudaDevice::dispatch_matmul(const OpCall& call) {
  const std::string name = op_name(call.id);
  const LtApi& api = lt_api(&options_);
  if (!api.error.empty()) throw Error(ErrorCode::Unsupported, std::string(kBackend) + ": " + name + ": cuBLASLt is unavailable: " + api.error);
  const bool dropout = call.id == OpId::linear_dropout && call.attrs.p > 0;
  const bool is_linear = call.id == OpId::linear || call.id == OpId::linear_dropout;
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

  const bool f64 = call.dtype == DType::f64, half = call.dtype == DType::f16 || call.dtype == DType::bf16;
  const DType odt = call.attrs.out_dtype ? *call.attrs.out_dtype : call.dtype;  // (the core admits it on these ops only)
  if (odt != call.dtype) return dispatch_matmul_out_dtype(call, odt, trans_a, M, N, K, batches);

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
  ep.y = ptr_of(y);
  ep.bias = bias && !lt_bias ? ptr_of(*bias) : nullptr;
  ep.res = res && !lt_res ? ptr_of(*res) : nullptr;
  ep.act = lt_act ? static_cast<int>(kActNone) : act;
  ep.total = y.numel;
  ep.n = N;
  set_dropout(ep, call);
  bool own_epilogue = ep.bias || ep.res || ep.act != kActNone || ep.thr != 0u;

  // Column-major: A (the weight / b: K x N transposed, or N x K), B (x / a: K x M), C and D (y^T: N x M).
  LtProduct g = product_of(call, trans_a, M, N, K, batches, ptr_of(y));
  if (lt_res) g.C = ptr_of(*res);
  g.beta_one = lt_res;
  g.epilogue = epi;
  g.bias = lt_bias ? ptr_of(*bias) : nullptr;
  const cublasLtEpilogue_t used = static_cast<cublasLtEpilogue_t>(lt_run(g, name));
  if (used != epi) {
    // No algorithm with the fused epilogue for this shape: the plain product ran, and the epilogue kernel
    // does bias and activation (the residual stays in beta = 1 where it was).
    epi = used;
    ep.bias = bias ? ptr_of(*bias) : nullptr;
    ep.act = act;
    own_epilogue = ep.bias || ep.res || ep.act != kActNone || ep.thr != 0u;
  }

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
    check_launch(launch_epilogue(dt, ep, static_cast<uint32_t>(blocks), stream_), "epilogue " + name);
    variant += "+epilogue-kernel";
  }
  return variant;
}

#endif

}  // namespace kf::hal::cuda
