// The CUDA/HIP kernels of the registry's ops: which kernel serves an op (looked up by name in one
// table), with which operand layouts, grid and parameters. An op of the registry that is not in the
// table (new ops land in src/ops/ before their CUDA kernel) is reported unsupported with the reason,
// never skipped and never run by a kernel written for another signature.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <unordered_map>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "kf/error.hpp"
#include "ops/reference_math.hpp"
#include "ops/registry.hpp"

namespace kf::hal::cuda {
namespace {

// Which kernel family of hal/cuda/ serves an op.
enum class Kern { Eltwise, Rows, Norm, NormBwd, SoftmaxBwd, BatchNorm, GroupNorm, Xent, Mse, Optim, Matmul };

struct Entry {
  Family family;            // the registry's family of the op (checked)
  Kern kern;
  int id;                   // EltOp, RowOp, NormOp, OptimOp; 1 for cross_entropy_backward
  const char* signature;    // the op's inputs the kernel reads, in order
};

// Every op with a kernel, by registry name. The signatures are checked against the registry's.
const std::unordered_map<std::string, Entry>& table() {
  static const std::unordered_map<std::string, Entry> t = [] {
    std::unordered_map<std::string, Entry> m;
    size_t elt_count = 0;
    auto elt = [&](const char* name, EltOp op, const char* sig) {
      m.emplace(name, Entry{Family::Elementwise, Kern::Eltwise, static_cast<int>(op), sig});
      ++elt_count;
    };
    elt("add_relu", EltOp::add_relu, "a,b");
    elt("mul_relu", EltOp::mul_relu, "a,b");
    elt("add_sigmoid", EltOp::add_sigmoid, "a,b");
    elt("mul_tanh", EltOp::mul_tanh, "a,b");
    elt("bias_relu", EltOp::bias_relu, "x,bias");
    elt("bias_gelu", EltOp::bias_gelu, "x,bias");
    elt("bias_gelu_tanh", EltOp::bias_gelu_tanh, "x,bias");
    elt("bias_silu", EltOp::bias_silu, "x,bias");
    elt("swiglu", EltOp::swiglu, "x,gate");
    elt("geglu", EltOp::geglu, "x,gate");
    elt("mish_scale", EltOp::mish_scale, "x,s");
    elt("prelu_bias", EltOp::prelu_bias, "x,a,bias");
    elt("dropout", EltOp::dropout, "x");
    elt("gelu_dropout", EltOp::gelu_dropout, "x");
    elt("bias_gelu_dropout", EltOp::bias_gelu_dropout, "x,bias");
    elt("add_dropout_residual", EltOp::add_dropout_residual, "x,r");
    elt("add", EltOp::add, "a,b");
    elt("mul", EltOp::mul, "a,b");
    elt("prelu", EltOp::prelu, "a,b");
    elt("copy", EltOp::copy, "x");
    elt("relu", EltOp::relu, "x");
    elt("sigmoid", EltOp::sigmoid, "x");
    elt("tanh", EltOp::tanh, "x");
    elt("gelu", EltOp::gelu, "x");
    elt("gelu_tanh", EltOp::gelu_tanh, "x");
    elt("silu", EltOp::silu, "x");
    elt("mish", EltOp::mish, "x");
    elt("relu_backward", EltOp::relu_backward, "dy,x");
    elt("sigmoid_backward", EltOp::sigmoid_backward, "dy,x");
    elt("tanh_backward", EltOp::tanh_backward, "dy,x");
    elt("gelu_backward", EltOp::gelu_backward, "dy,x");
    elt("gelu_tanh_backward", EltOp::gelu_tanh_backward, "dy,x");
    elt("silu_backward", EltOp::silu_backward, "dy,x");
    elt("mish_backward", EltOp::mish_backward, "dy,x");
    elt("mse_backward", EltOp::mse_backward, "a,b");
    if (elt_count != static_cast<size_t>(EltOp::count))
      throw Error(ErrorCode::Internal, std::string(kBackend) + ": the kernel table and kernels.hpp list other ops");
    // dropout_backward is dropout of dy with the forward's (p, seed, offset): the same mask.
    m.emplace("dropout_backward", Entry{Family::Elementwise, Kern::Eltwise, static_cast<int>(EltOp::dropout), "dy"});
    auto row = [&](const char* name, RowOp op) {
      m.emplace(name, Entry{Family::Reduction, Kern::Rows, static_cast<int>(op), "x"});
    };
    row("sum_squared", RowOp::sum_squared);
    row("mean_abs", RowOp::mean_abs);
    row("softmax", RowOp::softmax);
    row("log_softmax", RowOp::log_softmax);
    auto norm = [&](const char* name, NormOp op, const char* sig) {
      m.emplace(name, Entry{Family::Normalization, Kern::Norm, static_cast<int>(op), sig});
    };
    norm("layer_norm", NormOp::layer, "x,w,b");
    norm("layer_norm_relu", NormOp::layer_relu, "x,w,b");
    norm("layer_norm_gelu", NormOp::layer_gelu, "x,w,b");
    norm("layer_norm_silu", NormOp::layer_silu, "x,w,b");
    norm("rms_norm", NormOp::rms, "x,w");
    norm("rms_norm_gelu", NormOp::rms_gelu, "x,w");
    norm("rms_norm_silu", NormOp::rms_silu, "x,w");
    norm("add_layer_norm", NormOp::add_layer, "x,r,w,b");
    norm("add_rms_norm", NormOp::add_rms, "x,r,w");
    m.emplace("group_norm", Entry{Family::Normalization, Kern::GroupNorm, static_cast<int>(NormOp::layer), "x,w,b"});
    m.emplace("batch_norm_relu", Entry{Family::Normalization, Kern::BatchNorm, 0, "x,w,b,mean,var"});
    m.emplace("softmax_backward", Entry{Family::Normalization, Kern::SoftmaxBwd, 0, "dy,y"});
    m.emplace("layer_norm_backward", Entry{Family::Normalization, Kern::NormBwd, 1, "dy,x,w"});
    m.emplace("rms_norm_backward", Entry{Family::Normalization, Kern::NormBwd, 0, "dy,x,w"});
    m.emplace("cross_entropy", Entry{Family::Loss, Kern::Xent, 0, "logits,target"});
    m.emplace("cross_entropy_backward", Entry{Family::Loss, Kern::Xent, 1, "logits,target"});
    m.emplace("mse", Entry{Family::Loss, Kern::Mse, 0, "a,b"});
    m.emplace("adamw_step", Entry{Family::Optimizer, Kern::Optim, static_cast<int>(OptimOp::adamw), "param,grad,m,v"});
    m.emplace("sgd_step", Entry{Family::Optimizer, Kern::Optim, static_cast<int>(OptimOp::sgd), "param,grad,momentum_buffer"});
    m.emplace("linear", Entry{Family::Matmul, Kern::Matmul, 0, "x,W,bias,residual"});
    m.emplace("matmul", Entry{Family::Matmul, Kern::Matmul, 0, "a,b,bias,residual"});
    return m;
  }();
  return t;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}

bool dt_of(DType t, Dt* out) {
  switch (t) {
    case DType::f32: *out = Dt::f32; return true;
    case DType::f16: *out = Dt::f16; return true;
    case DType::bf16: *out = Dt::bf16; return true;
    case DType::f64: *out = Dt::f64; return true;
    default: return false;
  }
}

Mode mode_of(const TensorArg& a, int64_t n) {
  if (!a.buffer) return kAbsent;
  if (a.numel == n) return kFull;
  if (a.numel == 1) return kScalar;
  return kFeatures;
}


int64_t feat_of(const TensorArg& t) { return t.shape.empty() ? 1 : std::max<int64_t>(1, t.shape.back()); }

}  // namespace

// Sections 3 and 6: the row normalizations, group_norm, batch_norm_relu, the backward row kernels, the
// losses and the optimizers (norm.cu, train.cu); linear and matmul (matmul.cpp).
std::string CudaDevice::dispatch_training(const OpCall& call, int kern_id, int id, Dt dt) {
  const OpDef& op = *call.op;
  const Kern kern = static_cast<Kern>(kern_id);
  const std::string prefix = std::string(kBackend) + ":";
  const int warp = std::max<int>(32, static_cast<int>(info_.caps.subgroup_size));
  // Threads per row block: about 4 elements a thread, from one warp to 1024 threads.
  auto row_block = [&](int64_t L) {
    int b = warp;
    while (b < 1024 && int64_t(b) * 4 < L) b *= 2;
    return b;
  };
  auto in = [&](size_t k) -> const void* { return k < call.inputs.size() ? ptr_of(call.inputs[k].buffer) : nullptr; };
  const size_t acc = call.dtype == DType::f64 ? 8 : 4;  // bytes of the compute type
  const TensorArg& x = call.inputs[0];
  const double eps = op.eps_of(call.attrs);
  const uint32_t elt_blocks =
      static_cast<uint32_t>(std::clamp<int64_t>((x.numel + 255) / 256, 1, int64_t(sm_count_) * 32));

  switch (kern) {
    case Kern::Matmul:
      return dispatch_matmul(call);
    case Kern::Norm:
    case Kern::GroupNorm: {
      NormParams p;
      p.x = in(0);
      const bool add = id == static_cast<int>(NormOp::add_layer) || id == static_cast<int>(NormOp::add_rms);
      const size_t k0 = add ? 2 : 1;
      if (add) p.r = in(1);
      p.w = in(k0);
      const bool layer = id != static_cast<int>(NormOp::rms) && id != static_cast<int>(NormOp::rms_gelu) &&
                         id != static_cast<int>(NormOp::rms_silu) && id != static_cast<int>(NormOp::add_rms);
      if (layer) p.b = in(k0 + 1);
      p.y = ptr_of(call.outputs.back().buffer);
      if (add) p.s = ptr_of(call.outputs[0].buffer);
      p.eps = eps;
      if (kern == Kern::GroupNorm) {
        const int64_t N = x.shape[0], C = x.shape[1], inner = x.numel / (N * C), G = call.attrs.groups;
        p.rows = N * G, p.feat = C / G * inner, p.groups = G, p.cpg = C / G, p.inner = inner;
      } else {
        p.feat = feat_of(x), p.rows = x.numel / p.feat, p.groups = 1, p.cpg = p.feat, p.inner = 1;
      }
      if (p.rows == 0) return prefix + "norm/empty";
      const int block = row_block(p.feat);
      check_launch(launch_norm(static_cast<NormOp>(id), dt, p, block, stream_), "norm " + op.name);
      return prefix + "norm/block-per-row,block=" + std::to_string(block);
    }
    case Kern::NormBwd: {
      NormBwdParams p;
      p.dy = in(0), p.x = in(1), p.w = in(2);
      p.dx = ptr_of(call.outputs[0].buffer);
      p.dw = ptr_of(call.outputs[1].buffer);
      p.db = call.outputs.size() > 2 ? ptr_of(call.outputs[2].buffer) : nullptr;
      p.feat = feat_of(x), p.rows = x.numel / p.feat, p.eps = eps, p.layer = id;
      if (p.rows == 0) return prefix + "norm_bwd/empty";
      p.chunk_rows = 64;
      p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
      if (p.nchunks > 65535) {  // gridDim.y: longer chunks
        p.chunk_rows = (p.rows + 65534) / 65535;
        p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
      }
      const auto ws = scratch(acc * size_t(3 * p.rows + 2 * p.nchunks * p.feat));
      p.ws = ptr_of(ws);
      const int block = row_block(p.feat);
      check_launch(launch_norm_backward(dt, p, block, stream_), "norm backward " + op.name);
      return prefix + "norm_bwd/block-per-row,block=" + std::to_string(block) + ",column-chunks=" + std::to_string(p.nchunks);
    }
    case Kern::SoftmaxBwd: {
      SoftmaxBwdParams p;
      p.dy = in(0), p.y = in(1), p.dx = ptr_of(call.outputs[0].buffer);
      p.feat = feat_of(x), p.rows = x.numel / p.feat, p.scale = call.attrs.scale;
      if (p.rows == 0) return prefix + "softmax_bwd/empty";
      const int block = row_block(p.feat);
      check_launch(launch_softmax_backward(dt, p, block, stream_), "softmax_backward");
      return prefix + "softmax_bwd/block-per-row,block=" + std::to_string(block);
    }
    case Kern::BatchNorm: {
      BatchNormParams p;
      p.x = in(0), p.w = in(1), p.b = in(2), p.mean = in(3), p.var = in(4);
      p.y = ptr_of(call.outputs[0].buffer);
      p.n = x.numel, p.channels = x.shape[1], p.inner = x.numel / (x.shape[0] * x.shape[1]), p.eps = eps;
      if (p.n == 0) return prefix + "batchnorm/empty";
      check_launch(launch_batch_norm_relu(dt, p, elt_blocks, stream_), "batch_norm_relu");
      return prefix + "batchnorm/elementwise";
    }
    case Kern::Xent: {
      XentParams p;
      p.logits = in(0);
      p.target = static_cast<const int32_t*>(in(1));
      p.loss = ptr_of(call.outputs[0].buffer);
      p.grad = id == 1 ? ptr_of(call.outputs[1].buffer) : nullptr;
      p.rows = x.shape[0], p.classes = x.shape[1];
      p.ignore_index = static_cast<int32_t>(std::clamp<int64_t>(call.attrs.ignore_index, INT32_MIN, INT32_MAX));
      p.smoothing = call.attrs.label_smoothing;
      const auto ws = scratch(acc * size_t(1 + p.rows));
      p.ws = ptr_of(ws);
      const int block = row_block(p.classes);
      check_launch(launch_cross_entropy(dt, p, block, stream_), op.name);
      return prefix + "xent/block-per-row,block=" + std::to_string(block);
    }
    case Kern::Mse: {
      MseParams p;
      p.a = in(0), p.b = in(1), p.loss = ptr_of(call.outputs[0].buffer), p.n = x.numel;
      // A grid that depends on n alone: the same partial sums, so the same bits, every run.
      p.blocks = static_cast<int>(std::clamp<int64_t>((p.n + 2047) / 2048, 1, 1024));
      const auto ws = scratch(acc * size_t(p.blocks));
      p.ws = ptr_of(ws);
      check_launch(launch_mse(dt, p, stream_), "mse");
      return prefix + "mse/partials=" + std::to_string(p.blocks);
    }
    case Kern::Optim: {
      OptimParams p;
      const Attrs& a = call.attrs;
      p.p = in(0), p.g = in(1), p.m = in(2);
      p.p_out = ptr_of(call.outputs[0].buffer), p.m_out = ptr_of(call.outputs[1].buffer);
      p.n = x.numel;
      if (id == static_cast<int>(OptimOp::adamw)) {
        p.v = in(3), p.v_out = ptr_of(call.outputs[2].buffer);
        // optim.comp's scalars, in double on the host.
        const double bc1 = 1 - std::pow(a.beta1, double(a.step)), bc2 = 1 - std::pow(a.beta2, double(a.step));
        p.decay = 1 - a.lr * a.weight_decay;
        p.step_size = a.lr * std::sqrt(bc2) / bc1;
        p.beta1 = a.beta1, p.one_minus_beta1 = 1 - a.beta1, p.beta2 = a.beta2, p.one_minus_beta2 = 1 - a.beta2;
        p.eps_hat = eps * std::sqrt(bc2);
      } else {
        p.lr = a.lr, p.weight_decay = a.weight_decay, p.momentum = a.momentum, p.one_minus_dampening = 1 - a.dampening;
        p.momentum_on = a.momentum != 0, p.nesterov = a.nesterov, p.first_step = a.step == 1;
      }
      if (p.n == 0) return prefix + "optim/empty";
      check_launch(launch_optim(static_cast<OptimOp>(id), dt, p, elt_blocks, stream_), op.name);
      return prefix + "optim/elementwise";
    }
    default: break;
  }
  throw Error(ErrorCode::Internal, prefix + " " + op.name + ": no dispatch for its kernel family");
}


bool CudaDevice::supports(const OpDef& op, DType dtype, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  const std::string api = kBackend == std::string("hip") ? "HIP" : "CUDA";
  const auto it = table().find(op.name);
  if (it == table().end()) return no("no " + api + " kernel for " + op.name + " yet");
  const Entry& e = it->second;
  if (e.family != op.family || joined(op.inputs) != e.signature)
    return no("the " + api + " kernel for " + op.name + " reads inputs (" + e.signature +
              ") but the registry declares (" + joined(op.inputs) + "): no " + api + " kernel for this " + op.name +
              " yet");
  Dt dt;
  if (!dt_of(dtype, &dt)) return no("no " + api + " kernel for " + op.name + " in " + to_string(dtype));
  if (e.kern == Kern::Matmul && !matmul_supported(why)) return false;
  for (size_t k = 0; k < op.inputs.size(); ++k) {  // the kernels read every input in the op's dtype
    if (e.kern == Kern::Xent && k == 1 && op.input_dtype(k, dtype) == DType::i32) continue;  // the targets
    if (op.input_dtype(k, dtype) != dtype)
      return no("the " + api + " kernel for " + op.name + " reads input '" + op.inputs[k] + "' as " +
                to_string(dtype) + ", the registry declares " + to_string(op.input_dtype(k, dtype)));
  }
  return true;
}

std::string CudaDevice::dispatch(const OpCall& call) {
  const OpDef& op = *call.op;
  const Entry& entry = table().at(op.name);  // supports() was asked first
  Dt dt = Dt::f32;
  dt_of(call.dtype, &dt);
  const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
  const TensorArg& out = call.outputs[0];
  const std::string prefix = std::string(kBackend) + ":";
  make_current();

  if (entry.kern != Kern::Eltwise && entry.kern != Kern::Rows)
    return dispatch_training(call, static_cast<int>(entry.kern), entry.id, dt);

  if (entry.kern == Kern::Eltwise) {
    EltwiseParams p;
    p.n = out.numel;
    p.feat = out.shape.empty() ? 1 : std::max<int64_t>(1, out.shape.back());
    if (p.n == 0) return prefix + "eltwise/empty";
    const bool packed = call.inputs.size() > 1 && !call.inputs[1].buffer && op.required_inputs == 1 &&
                        op.inputs.size() == 2 && op.inputs[1] == "gate";
    p.mode1 = packed ? kAbsent : (call.inputs.size() > 1 ? mode_of(call.inputs[1], p.n) : kAbsent);
    p.mode2 = call.inputs.size() > 2 ? mode_of(call.inputs[2], p.n) : kAbsent;
    p.packed = packed;
    p.gather = (packed || p.mode1 == kFeatures || p.mode2 == kFeatures) && p.feat % vw != 0;
    p.in0 = ptr_of(call.inputs[0].buffer);
    if (call.inputs.size() > 1) p.in1 = ptr_of(call.inputs[1].buffer);
    if (call.inputs.size() > 2) p.in2 = ptr_of(call.inputs[2].buffer);
    p.out = ptr_of(out.buffer);
    if (op.random) {
      p.seed_lo = static_cast<uint32_t>(call.attrs.seed);
      p.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
      p.off_lo = static_cast<uint32_t>(call.attrs.offset);
      p.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
      p.thr = ref::dropout_threshold(call.attrs.p);
      p.keep_d = 1.0 / (1.0 - call.attrs.p);
      p.keep_f = static_cast<float>(p.keep_d);
    }
    p.n_d = static_cast<double>(p.n);
    p.n_f = static_cast<float>(p.n);
    const int64_t packs = (p.n + vw - 1) / vw;
    const int64_t tiles = (packs + int64_t(kEltwiseThreads) * kEltwiseItems - 1) / (int64_t(kEltwiseThreads) * kEltwiseItems);
    // Up to 32 blocks per multiprocessor (4 waves of 8 resident blocks); blocks stride over the rest.
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(tiles, 1, int64_t(sm_count_) * 32));
    check_launch(launch_eltwise(static_cast<EltOp>(entry.id), dt, p, blocks, stream_), "eltwise " + op.name);
    return prefix + "eltwise/" + (p.gather ? "gather" : "16B-packs");
  }

  // Row kernels: tpr threads per row, enough that each caches its share of the row (softmax) or reads
  // about two rounds of its unrolled loads (sums); 256-thread blocks, or one 1024-thread block per row
  // for rows longer than 256 threads hold.
  const TensorArg& in = call.inputs[0];
  RowsParams p;
  p.feat = std::max<int64_t>(1, in.shape.empty() ? 1 : in.shape.back());
  p.rows = in.numel / p.feat;
  if (p.rows == 0) return prefix + "rows/empty";
  p.in = ptr_of(in.buffer);
  p.out = ptr_of(out.buffer);
  p.wide = p.feat % vw == 0;
  p.scale = static_cast<float>(call.attrs.scale);
  p.scale_d = call.attrs.scale;
  const bool sums = entry.id == static_cast<int>(RowOp::sum_squared) || entry.id == static_cast<int>(RowOp::mean_abs);
  const int64_t units = p.wide ? p.feat / vw : p.feat;
  if (p.feat > INT32_MAX)  // rows.cu indexes within a row in 32 bits
    throw Error(ErrorCode::Unsupported, prefix + " " + op.name + ": rows of " + std::to_string(p.feat) +
                                            " features exceed the row kernels' 2^31 - 1");
  const int64_t per_value = call.dtype == DType::f64 ? 2 : 1;  // f64 caches half as many values
  auto per_thread = [&](int cache_values) -> int64_t {
    if (sums) return 8;
    const int64_t v = cache_values / per_value;
    return std::max<int64_t>(1, p.wide ? v / vw : v);
  };
  const int warp = std::max<int>(1, static_cast<int>(info_.caps.subgroup_size));
  const int cache = rows_values_;
  int block = 256, tpr = warp;
  while (int64_t(tpr) * per_thread(cache) < units && tpr < 256) tpr *= 2;
  if (int64_t(tpr) * per_thread(cache) < units) block = tpr = 1024;
  p.tpr = tpr;
  const int64_t rpb = block / tpr;
  const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((p.rows + rpb - 1) / rpb, 1, int64_t(1) << 30));
  check_launch(launch_rows(static_cast<RowOp>(entry.id), dt, p, block, cache, blocks, stream_), "rows " + op.name);
  return prefix + "rows/warp-shuffle,tpr=" + std::to_string(tpr) + ",block=" + std::to_string(block) +
         (sums || block == 1024 ? "" : ",cache=" + std::to_string(cache)) + (p.wide ? ",16B-packs" : ",scalar");
}

}  // namespace kf::hal::cuda
