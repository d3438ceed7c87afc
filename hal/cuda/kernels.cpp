// The CUDA/HIP kernels of the registry's ops: which kernel serves an op (looked up by its OpId in one
// table), with which operand layouts, grid and parameters. An op of the registry that is not in the
// table (new ops land in src/ops/ before their CUDA kernel) is reported unsupported with the reason,
// never skipped; tests/test_cuda_table.cpp checks the table's signatures against the registry's, so
// that no op is run by a kernel written for another signature.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <array>

#include "hal/cuda/device.hpp"
#include "hal/cuda/kernels.hpp"
#include "hal/cuda/op_table.hpp"
#include "kf/error.hpp"
#include "plan/attention.hpp"
#include "plan/dropout.hpp"

namespace kf::hal::cuda {
namespace {

// The mask, bias, RoPE and dropout options of attention's parameters (the forward's and, in
// AttnBwdParams::a, the backward's); slopes_given: ALiBi slopes were passed as an input.
void set_attn_options(AttnParams& p, const Attrs& a, bool slopes_given) {
  p.causal = a.causal ? 1 : 0;
  p.window = static_cast<int>(std::min<int64_t>(a.window, INT32_MAX));
  p.alibi = slopes_given ? 2 : a.alibi ? 1 : 0;
  p.softcap = a.softcap;
  p.rope_mode = static_cast<int>(a.rope);
  p.dropout = a.p > 0 ? 1 : 0;
  p.seed_lo = static_cast<uint32_t>(a.seed);
  p.seed_hi = static_cast<uint32_t>(a.seed >> 32);
  p.off_lo = static_cast<uint32_t>(a.offset);
  p.off_hi = static_cast<uint32_t>(a.offset >> 32);
  p.thr = plan::dropout_threshold(a.p);
  p.keep_scale = 1.0 / (1.0 - a.p);
  philox_round_keys(p.seed_lo, p.seed_hi, p.rk);
}

// Which kernel family of hal/cuda/ serves an op.
enum class Kern { Eltwise, Rows, Norm, NormBwd, SoftmaxBwd, BatchNorm, GroupNorm, Xent, Mse, Optim, Matmul, Embedding,
                  Attention, Conv, Lce };

struct Entry {
  Family family = Family::Elementwise;  // the registry's family of the op (tests/test_cuda_table.cpp)
  Kern kern = Kern::Eltwise;
  int id = 0;                     // EltOp, RowOp, NormOp, OptimOp; 1 for cross_entropy_backward
  const char* signature = nullptr;  // the op's inputs the kernel reads, in order; null: no kernel
  uint32_t i32_inputs = 0;        // bit k: input k is read as int32 (indices, lengths, masks)
  bool random = false;            // reads p, seed, offset (Philox dropout)
};

// Every op with a kernel, indexed by OpId.
const std::array<Entry, kOpCount>& table() {
  static const std::array<Entry, kOpCount> t = [] {
    std::array<Entry, kOpCount> m{};
    auto put = [&](OpId id, Entry e) { m[static_cast<size_t>(id)] = e; };
    size_t elt_count = 0;
    auto elt = [&](OpId id, EltOp op, const char* sig) {
      const bool random = op == EltOp::dropout || op == EltOp::gelu_dropout || op == EltOp::bias_gelu_dropout ||
                          op == EltOp::add_dropout_residual;
      put(id, Entry{Family::Elementwise, Kern::Eltwise, static_cast<int>(op), sig, 0, random});
      ++elt_count;
    };
    elt(OpId::add_relu, EltOp::add_relu, "a,b");
    elt(OpId::mul_relu, EltOp::mul_relu, "a,b");
    elt(OpId::add_sigmoid, EltOp::add_sigmoid, "a,b");
    elt(OpId::mul_tanh, EltOp::mul_tanh, "a,b");
    elt(OpId::bias_relu, EltOp::bias_relu, "x,bias");
    elt(OpId::bias_gelu, EltOp::bias_gelu, "x,bias");
    elt(OpId::bias_gelu_tanh, EltOp::bias_gelu_tanh, "x,bias");
    elt(OpId::bias_silu, EltOp::bias_silu, "x,bias");
    elt(OpId::swiglu, EltOp::swiglu, "x,gate");
    elt(OpId::geglu, EltOp::geglu, "x,gate");
    elt(OpId::mish_scale, EltOp::mish_scale, "x,s");
    elt(OpId::prelu_bias, EltOp::prelu_bias, "x,a,bias");
    elt(OpId::dropout, EltOp::dropout, "x");
    elt(OpId::gelu_dropout, EltOp::gelu_dropout, "x");
    elt(OpId::bias_gelu_dropout, EltOp::bias_gelu_dropout, "x,bias");
    elt(OpId::add_dropout_residual, EltOp::add_dropout_residual, "x,r");
    elt(OpId::add, EltOp::add, "a,b");
    elt(OpId::mul, EltOp::mul, "a,b");
    elt(OpId::prelu, EltOp::prelu, "a,b");
    elt(OpId::copy, EltOp::copy, "x");
    elt(OpId::relu, EltOp::relu, "x");
    elt(OpId::sigmoid, EltOp::sigmoid, "x");
    elt(OpId::tanh, EltOp::tanh, "x");
    elt(OpId::gelu, EltOp::gelu, "x");
    elt(OpId::gelu_tanh, EltOp::gelu_tanh, "x");
    elt(OpId::silu, EltOp::silu, "x");
    elt(OpId::mish, EltOp::mish, "x");
    elt(OpId::relu_backward, EltOp::relu_backward, "dy,x");
    elt(OpId::sigmoid_backward, EltOp::sigmoid_backward, "dy,x");
    elt(OpId::tanh_backward, EltOp::tanh_backward, "dy,x");
    elt(OpId::gelu_backward, EltOp::gelu_backward, "dy,x");
    elt(OpId::gelu_tanh_backward, EltOp::gelu_tanh_backward, "dy,x");
    elt(OpId::silu_backward, EltOp::silu_backward, "dy,x");
    elt(OpId::mish_backward, EltOp::mish_backward, "dy,x");
    elt(OpId::mse_backward, EltOp::mse_backward, "a,b");
    if (elt_count != static_cast<size_t>(EltOp::count))
      throw Error(ErrorCode::Internal, std::string(kBackend) + ": the kernel table and kernels.hpp list other ops");
    // dropout_backward is dropout of dy with the forward's (p, seed, offset): the same mask.
    put(OpId::dropout_backward, Entry{Family::Elementwise, Kern::Eltwise, static_cast<int>(EltOp::dropout), "dy", 0, true});
    auto row = [&](OpId id, RowOp op) {
      put(id, Entry{Family::Reduction, Kern::Rows, static_cast<int>(op), "x"});
    };
    row(OpId::sum_squared, RowOp::sum_squared);
    row(OpId::mean_abs, RowOp::mean_abs);
    row(OpId::softmax, RowOp::softmax);
    row(OpId::log_softmax, RowOp::log_softmax);
    auto norm = [&](OpId id, NormOp op, const char* sig) {
      put(id, Entry{Family::Normalization, Kern::Norm, static_cast<int>(op), sig});
    };
    norm(OpId::layer_norm, NormOp::layer, "x,w,b");
    norm(OpId::layer_norm_relu, NormOp::layer_relu, "x,w,b");
    norm(OpId::layer_norm_gelu, NormOp::layer_gelu, "x,w,b");
    norm(OpId::layer_norm_silu, NormOp::layer_silu, "x,w,b");
    norm(OpId::rms_norm, NormOp::rms, "x,w");
    norm(OpId::rms_norm_gelu, NormOp::rms_gelu, "x,w");
    norm(OpId::rms_norm_silu, NormOp::rms_silu, "x,w");
    norm(OpId::add_layer_norm, NormOp::add_layer, "x,r,w,b");
    norm(OpId::add_rms_norm, NormOp::add_rms, "x,r,w");
    put(OpId::group_norm, Entry{Family::Normalization, Kern::GroupNorm, static_cast<int>(NormOp::layer), "x,w,b"});
    put(OpId::batch_norm_relu, Entry{Family::Normalization, Kern::BatchNorm, 0, "x,w,b,mean,var"});
    put(OpId::softmax_backward, Entry{Family::Normalization, Kern::SoftmaxBwd, 0, "dy,y"});
    put(OpId::layer_norm_backward, Entry{Family::Normalization, Kern::NormBwd, 1, "dy,x,w"});
    put(OpId::rms_norm_backward, Entry{Family::Normalization, Kern::NormBwd, 0, "dy,x,w"});
    put(OpId::cross_entropy, Entry{Family::Loss, Kern::Xent, 0, "logits,target", 1u << 1});
    put(OpId::cross_entropy_backward, Entry{Family::Loss, Kern::Xent, 1, "logits,target", 1u << 1});
    put(OpId::mse, Entry{Family::Loss, Kern::Mse, 0, "a,b"});
    // linear_cross_entropy(_backward): chunks of cuBLASLt products and train.cu's row pass (lce.cpp).
    put(OpId::linear_cross_entropy, Entry{Family::Loss, Kern::Lce, 0, "h,W,target", 1u << 2});
    put(OpId::linear_cross_entropy_backward, Entry{Family::Loss, Kern::Lce, 1, "h,W,target", 1u << 2});
    put(OpId::adamw_step, Entry{Family::Optimizer, Kern::Optim, static_cast<int>(OptimOp::adamw), "param,grad,m,v"});
    put(OpId::sgd_step, Entry{Family::Optimizer, Kern::Optim, static_cast<int>(OptimOp::sgd), "param,grad,momentum_buffer"});
    put(OpId::linear, Entry{Family::Matmul, Kern::Matmul, 0, "x,W,bias,residual"});
    put(OpId::linear_dropout, Entry{Family::Matmul, Kern::Matmul, 0, "x,W,bias,residual"});
    put(OpId::matmul, Entry{Family::Matmul, Kern::Matmul, 0, "a,b,bias,residual"});
    // Section 4's convolutions (conv.cu; dispatch_conv below). depthwise_pointwise is composed of conv2d.
    put(OpId::conv2d, Entry{Family::Matmul, Kern::Conv, 0, "x,W,bias"});
    put(OpId::conv2d_bn_relu, Entry{Family::Matmul, Kern::Conv, 0, "x,W,bn_w,bn_b,bn_mean,bn_var,conv_bias"});
    put(OpId::conv2d_gelu_dropout, Entry{Family::Matmul, Kern::Conv, 0, "x,W,bias"});
    // Section 4's embedding and section 5 (attention.cu; dispatch_attention below).
    put(OpId::embedding, Entry{Family::Elementwise, Kern::Embedding, 0, "tokens,table,pos", 1u << 0});
    put(OpId::attention_scores, Entry{Family::Attention, Kern::Attention, 0, "q,k"});
    put(OpId::attention, Entry{Family::Attention, Kern::Attention, 1,
                               "q,k,v,alibi_slopes,key_lengths,cu_seqlens_q,cu_seqlens_k,sinks,block_mask",
                               1u << 4 | 1u << 5 | 1u << 6 | 1u << 8});
    put(OpId::attention_backward,
        Entry{Family::Attention, Kern::Attention, 2,
              "q,k,v,o,do,lse,alibi_slopes,key_lengths,cu_seqlens_q,cu_seqlens_k,sinks,block_mask",
              1u << 7 | 1u << 8 | 1u << 9 | 1u << 11});
    return m;
  }();
  return t;
}

const Entry& entry_of(OpId id) { return table()[static_cast<size_t>(id)]; }

Mode mode_of(const TensorArg& a, int64_t n) {
  if (!a.buffer) return kAbsent;
  if (a.numel == n) return kFull;
  if (a.numel == 1) return kScalar;
  return kFeatures;
}


int64_t feat_of(const TensorArg& t) { return t.shape.empty() ? 1 : std::max<int64_t>(1, t.shape.back()); }

// What a kernel cannot take in a call that the op's checks accept, seen from the call alone (its dtype,
// shapes and attributes): the reason, or "". supports() says it, so that dispatch refuses none of these.
std::string call_refusal(const OpCall& call, const Entry& e) {
  // Attrs::out_dtype: the matrix products store it (matmul.cpp); no other kernel does.
  if (call.attrs.out_dtype && *call.attrs.out_dtype != call.dtype && e.kern != Kern::Matmul)
    return "an output dtype (" + std::string(to_string(*call.attrs.out_dtype)) + ") other than the inputs' (" +
           to_string(call.dtype) + ") has no " + kBackend + " kernel";
  if (call.attrs.out_dtype && *call.attrs.out_dtype != call.dtype) {  // matmul.cpp dispatch_matmul_out_dtype
    Dt in_dt, out_dt;
    if (!dt_of(call.dtype, &in_dt) || !dt_of(*call.attrs.out_dtype, &out_dt) || in_dt == Dt::f64 || out_dt == Dt::f64)
      return "no product stores " + std::string(to_string(*call.attrs.out_dtype)) + " from " + to_string(call.dtype) +
             " inputs (f32, f16 and bf16 mix; f64 does not)";
  }
  const TensorArg& x = call.inputs.at(0);
  switch (e.kern) {
    case Kern::Rows: {  // rows.cu indexes within a row in 32 bits
      const int64_t feat = std::max<int64_t>(1, x.shape.empty() ? 1 : x.shape.back());
      if (x.numel / feat > 0 && feat > INT32_MAX)
        return "rows of " + std::to_string(feat) + " features exceed the row kernels' 2^31 - 1";
      return "";
    }
    case Kern::Lce: {
      const int64_t N = x.shape[0], D = x.shape[1], C = call.inputs[1].shape[0];
      if (C == 0 || D == 0)
        return "no " + std::string(kBackend == std::string("hip") ? "HIP" : "CUDA") + " path for " + std::to_string(C) +
               " classes of " + std::to_string(D) + " features";
      if (C > INT32_MAX || D > INT32_MAX || N > (int64_t(1) << 40)) return "a dimension exceeds the products' limits";
      return "";
    }
    case Kern::Attention: {
      // A custom score function is compiled into the kernel at run time; this backend has no run-time
      // compiler (NVRTC is not used).
      if (!call.attrs.score_mod.empty() && call.id != OpId::attention_scores)
        return "a custom score function (score_mod) is compiled into the kernel at run time, which the CUDA backend "
               "does not do (the Vulkan and CPU backends do)";
      const bool bwd = call.id == OpId::attention_backward;
      std::vector<Shape> shapes;  // the forward's inputs (backward inputs 6.. are forward inputs 3..)
      for (size_t k = 0; k < call.inputs.size(); ++k) {
        if (bwd && k >= 3 && k < 6) continue;
        shapes.push_back(call.inputs[k].buffer ? call.inputs[k].shape : Shape{});
      }
      const plan::AttnGeometry g = plan::attn_geometry(shapes);
      for (const int64_t v : {g.B, g.Hq, g.Hkv, g.SqT, g.SkT, g.nseq, bwd ? g.Hq / g.Hkv * g.SqT : 0})
        if (v > INT32_MAX) return "a dimension of " + std::to_string(v) + " exceeds the kernels' 2^31 - 1";
      if (call.id == OpId::attention_scores && call.outputs[0].numel > 0 &&
          ((g.SqT + 15) / 16 > 65535 || g.B * g.Hq > 65535))
        return "the grid exceeds 65535 blocks in y or z (" + std::to_string((g.SqT + 15) / 16) + " query tiles, " +
               std::to_string(g.B * g.Hq) + " heads)";
      return "";
    }
    default:
      return "";
  }
}

}  // namespace

KernelSignature kernel_signature(OpId id) {
  const Entry& e = entry_of(id);
  return {e.signature != nullptr, e.family, e.signature ? e.signature : "", e.i32_inputs, e.random};
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

// Sections 3 and 6: the row normalizations, group_norm, batch_norm_relu, the backward row kernels, the
// losses and the optimizers (norm.cu, train.cu); linear and matmul (matmul.cpp).
std::string CudaDevice::dispatch_training(const OpCall& call, int kern_id, int id, Dt dt) {
  const std::string name = op_name(call.id);
  const Kern kern = static_cast<Kern>(kern_id);
  const std::string prefix = std::string(kBackend) + ":";
  const int warp = std::max<int>(32, static_cast<int>(info_.caps.subgroup_size));
  // Threads per row block: about 4 elements a thread, from one warp to 1024 threads.
  auto row_block = [&](int64_t L) {
    int b = warp;
    while (b < 1024 && int64_t(b) * 4 < L) b *= 2;
    return b;
  };
  auto in = [&](size_t k) -> const void* { return k < call.inputs.size() ? ptr_of(call.inputs[k]) : nullptr; };
  const size_t acc = call.dtype == DType::f64 ? 8 : 4;  // bytes of the compute type
  const TensorArg& x = call.inputs[0];
  const double eps = call.attrs.eps;
  const uint32_t elt_blocks =
      static_cast<uint32_t>(std::clamp<int64_t>((x.numel + 255) / 256, 1, int64_t(sm_count_) * 32));

  switch (kern) {
    case Kern::Matmul:
      return dispatch_matmul(call);
    case Kern::Lce:
      return dispatch_linear_cross_entropy(call, dt);
    case Kern::Embedding:
    case Kern::Attention:
      return dispatch_attention(call, dt);
    case Kern::Conv:
      return dispatch_conv(call, dt);
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
      p.y = ptr_of(call.outputs.back());
      if (add) p.s = ptr_of(call.outputs[0]);
      p.eps = eps;
      if (kern == Kern::GroupNorm) {
        const int64_t N = x.shape[0], C = x.shape[1], inner = x.numel / (N * C), G = call.attrs.groups;
        p.rows = N * G, p.feat = C / G * inner, p.groups = G, p.cpg = C / G, p.inner = inner;
      } else {
        p.feat = feat_of(x), p.rows = x.numel / p.feat, p.groups = 1, p.cpg = p.feat, p.inner = 1;
      }
      if (p.rows == 0) return prefix + "norm/empty";
      p.smem_limit = max_shared_optin_, p.l2_bytes = l2_bytes_;
      p.cluster = rows_cluster_, p.cc = cc_;
      if (kern == Kern::Norm) no_clusters(name);
      const int block = row_block(p.feat);
      NormLaunch l;
      check_launch(launch_norm(static_cast<NormOp>(id), dt, p, block, stream_, &l), "norm " + name);
      if (l.block)
        return prefix + "norm/register-cache,16B-packs,block=" + std::to_string(l.block) +
               (l.cluster ? ",cluster=" + std::to_string(l.cluster) : "") +
               (l.cache == 4 ? "" : ",regs=" + std::to_string(l.cache)) +
               (l.smem_packs ? ",smem=" + std::to_string(l.smem_packs) : "") +
               (l.streamed ? ",streamed=" + std::to_string(l.streamed) + ",grid=" + std::to_string(l.grid) : "");
      return prefix + "norm/block-per-row,block=" + std::to_string(block);
    }
    case Kern::NormBwd: {
      NormBwdParams p;
      p.dy = in(0), p.x = in(1), p.w = in(2);
      p.dx = ptr_of(call.outputs[0]);
      p.dw = ptr_of(call.outputs[1]);
      p.db = call.outputs.size() > 2 ? ptr_of(call.outputs[2]) : nullptr;
      p.feat = feat_of(x), p.rows = x.numel / p.feat, p.eps = eps, p.layer = id;
      if (p.rows == 0) return prefix + "norm_bwd/empty";
      p.chunk_rows = 64;
      p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
      if (p.nchunks > 65535) {  // gridDim.y: longer chunks
        p.chunk_rows = (p.rows + 65534) / 65535;
        p.nchunks = (p.rows + p.chunk_rows - 1) / p.chunk_rows;
      }
      p.sms = sm_count_, p.smem_limit = max_shared_optin_;
      const int block = row_block(p.feat);
      NormBwdLaunch l;
      plan_norm_backward(dt, p, block, l);
      const auto ws = scratch(acc * size_t(l.ws_elems));
      p.ws = ptr_of(ws);
      check_launch(launch_norm_backward(dt, p, l, stream_), "norm backward " + name);
      if (l.fused)
        return prefix + "norm_bwd/fused-columns" + (l.fused == 2 ? "-in-registers" : "") + ",16B-packs,block=" + std::to_string(l.block) +
               ",partials=" + std::to_string(l.grid);
      return prefix + "norm_bwd/block-per-row,block=" + std::to_string(block) + ",column-chunks=" + std::to_string(p.nchunks);
    }
    case Kern::SoftmaxBwd: {
      SoftmaxBwdParams p;
      p.dy = in(0), p.y = in(1), p.dx = ptr_of(call.outputs[0]);
      p.feat = feat_of(x), p.rows = x.numel / p.feat, p.scale = call.attrs.scale;
      if (p.rows == 0) return prefix + "softmax_bwd/empty";
      const int block = row_block(p.feat);
      int packs_block = 0;
      check_launch(launch_softmax_backward(dt, p, block, stream_, &packs_block), "softmax_backward");
      if (packs_block)
        return prefix + "softmax_bwd/block-per-row,block=" + std::to_string(packs_block) + ",16B-packs";
      return prefix + "softmax_bwd/block-per-row,block=" + std::to_string(block);
    }
    case Kern::BatchNorm: {
      BatchNormParams p;
      p.x = in(0), p.w = in(1), p.b = in(2), p.mean = in(3), p.var = in(4);
      p.y = ptr_of(call.outputs[0]);
      p.n = x.numel, p.channels = x.shape[1], p.inner = x.numel / (x.shape[0] * x.shape[1]), p.eps = eps;
      if (p.n == 0) return prefix + "batchnorm/empty";
      check_launch(launch_batch_norm_relu(dt, p, elt_blocks, stream_), "batch_norm_relu");
      // (norm.cu's choice: 16-byte packs where H W is a multiple of the pack and x, y are aligned)
      const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
      const bool packs = p.inner % vw == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15) == 0 &&
                         (reinterpret_cast<uintptr_t>(p.y) & 15) == 0;
      return prefix + (packs ? "batchnorm/16B-packs" : "batchnorm/elementwise");
    }
    case Kern::Xent: {
      XentParams p;
      p.logits = in(0);
      p.target = static_cast<const int32_t*>(in(1));
      p.loss = ptr_of(call.outputs[0]);
      p.grad = id == 1 ? ptr_of(call.outputs[1]) : nullptr;
      p.rows = x.shape[0], p.classes = x.shape[1];
      p.ignore_index = static_cast<int32_t>(std::clamp<int64_t>(call.attrs.ignore_index, INT32_MIN, INT32_MAX));
      p.smoothing = call.attrs.label_smoothing;
      const auto ws = scratch(acc * size_t(xent_ws_values(dt, p.rows, p.classes, id == 1)));
      p.ws = ptr_of(ws);
      // train.cu's layout: the forward streams each row (long rows split over several blocks), the
      // backward holds it in registers and shared memory (read once where it fits; long rows on sm_90:
      // thread-block clusters).
      if (id == 1) {
        p.cluster = rows_cluster_, p.cc = cc_;
        no_clusters(name);
      }
      XentLaunch l;
      check_launch(launch_cross_entropy(dt, p, max_shared_optin_, stream_, &l), name);
      if (l.cluster)
        return prefix + "xent/cluster-per-row,block=" + std::to_string(l.block) + ",cluster=" + std::to_string(l.cluster) +
               ",regs=" + std::to_string(l.regs) + ",smem=" + std::to_string(l.smem_packs);
      return prefix + "xent/block-per-row,block=" + std::to_string(l.block) +
             (id == 1 ? ",regs=" + std::to_string(l.regs) + ",smem=" + std::to_string(l.smem_packs)
                      : ",splits=" + std::to_string(l.splits));
    }
    case Kern::Mse: {
      MseParams p;
      p.a = in(0), p.b = in(1), p.loss = ptr_of(call.outputs[0]), p.n = x.numel;
      // A grid that depends on n alone: the same partial sums, so the same bits, every run.
      p.blocks = static_cast<int>(std::clamp<int64_t>((p.n + 2047) / 2048, 1, 1024));
      const auto ws = scratch(acc * size_t(p.blocks));
      p.ws = ptr_of(ws);
      check_launch(launch_mse(dt, p, stream_), "mse");
      return prefix + "mse/partials=" + std::to_string(p.blocks) + (mse_packs(p) ? ",16B-packs" : "");
    }
    case Kern::Optim: {
      OptimParams p;
      const Attrs& a = call.attrs;
      p.p = in(0), p.g = in(1), p.m = in(2);
      p.p_out = ptr_of(call.outputs[0]), p.m_out = ptr_of(call.outputs[1]);
      p.n = x.numel;
      if (id == static_cast<int>(OptimOp::adamw)) {
        p.v = in(3), p.v_out = ptr_of(call.outputs[2]);
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
      p.items = optim_items_;
      const uint32_t blocks = optim_blocks_ ? static_cast<uint32_t>(std::clamp<int64_t>(
                                                  (x.numel + 255) / 256, 1, int64_t(sm_count_) * optim_blocks_))
                                            : elt_blocks;
      check_launch(launch_optim(static_cast<OptimOp>(id), dt, p, blocks, stream_), name);
      return prefix + "optim/elementwise" + (optim_items_ ? ",items=" + std::to_string(optim_items_) : "") +
             (optim_blocks_ ? ",blocks_per_sm=" + std::to_string(optim_blocks_) : "");
    }
    default: break;
  }
  throw Error(ErrorCode::Internal, prefix + " " + name + ": no dispatch for its kernel family");
}

namespace {
// Why the warpgroup (wgmma) attention kernels cannot run here, or "": a HIP build or one without sm_90a code
// (KF_CUDA_ARCHITECTURES without 90a: no KF_CUDA_WGMMA), or a GPU other than compute capability 9.0.
std::string wgmma_unavailable(int cc) {
#if defined(KF_HIP)
  (void)cc;
  return "a HIP build has no warpgroup kernel";
#elif !defined(KF_CUDA_WGMMA)
  (void)cc;
  return std::string("this build has no sm_90a code (KF_CUDA_ARCHITECTURES ") + KF_CUDA_ARCHS + ")";
#else
  if (cc != 90) return "it needs a compute capability 9.0 GPU (this one is " + std::to_string(cc / 10) + "." + std::to_string(cc % 10) + ")";
  return "";
#endif
}
}  // namespace

// embedding, attention_scores and attention (attention.cu). attention: the tensor-core kernel (f16 and
// bf16, D % 16 == 0, where its shared memory fits) when a tile of 64 query rows has at least 32 rows to
// fill it, else the portable kernel with the largest tile under 48 KiB of shared memory; when the grid
// would be small (decoding: few query rows, long caches) the keys are split over blocks and a combine
// pass merges the partials. KF_TUNE attn_path=1 / 2 forces the portable / tensor-core kernel (2 raises
// Unsupported where it does not apply), attn_split=1 one pass, attn_split=N exactly N splits,
// attn_rows=8/16/32 caps the portable kernel's query rows per block; attn_wmma picks the tensor-core kernel:
// flash-mma (the FlashAttention-2 kernel, the default where it applies: D 64 / 128, no RoPE), else
// flash-wmma-regs; attn_wmma=mma forces flash-mma, regs / smem the wmma kernels (flash-wmma-regs, flash-wmma);
// attn_rows_per_warp=16|32 flash-mma's query rows per warp (absent: 32, blocks of 128 rows).
std::string CudaDevice::dispatch_attention(const OpCall& call, Dt dt) {
  const std::string name = op_name(call.id);
  const Attrs& a = call.attrs;
  const std::string prefix = std::string(kBackend) + ":";
  auto in = [&](size_t k) -> const void* { return k < call.inputs.size() ? ptr_of(call.inputs[k]) : nullptr; };
  const TensorArg& out = call.outputs[0];

  if (call.id == OpId::embedding) {
    const TensorArg& tok = call.inputs[0];
    const TensorArg& table = call.inputs[1];
    EmbeddingParams p;
    p.tokens = static_cast<const int32_t*>(in(0));
    p.table = in(1);
    p.pos = in(2);
    p.y = ptr_of(out);
    p.rows = tok.numel;
    p.d = table.shape[1];
    p.L = tok.shape.empty() ? 1 : tok.shape.back();
    p.V = table.shape[0];
    const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
    p.wide = p.d % vw == 0;
    const int64_t n = p.rows * p.d;
    if (n == 0) return prefix + "embedding/empty";
    const int64_t units = p.wide ? n / vw : n;
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((units + 255) / 256, 1, int64_t(sm_count_) * 32));
    check_launch(launch_embedding(dt, p, blocks, stream_), "embedding");
    return prefix + "embedding/" + (p.wide ? "16B-packs" : "elements");
  }

  if (call.id == OpId::attention_backward) return dispatch_attention_backward(call, dt);

  std::vector<Shape> shapes;
  for (const auto& t : call.inputs) shapes.push_back(t.buffer ? t.shape : Shape{});
  const plan::AttnGeometry g = plan::attn_geometry(shapes);  // (dimensions within 2^31 - 1: supports())
  AttnParams p;
  p.q = in(0), p.k = in(1), p.o = ptr_of(out);
  p.B = static_cast<int>(g.B), p.Hq = static_cast<int>(g.Hq), p.Hkv = static_cast<int>(g.Hkv);
  p.SqT = static_cast<int>(g.SqT), p.SkT = static_cast<int>(g.SkT), p.G = static_cast<int>(g.Hq / g.Hkv);
  p.D = static_cast<int>(g.D), p.nseq = static_cast<int>(g.nseq);
  p.scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(g.D));
  if (out.numel == 0) return prefix + name + "/empty";

  if (call.id == OpId::attention_scores) {  // (its grid within 65535 blocks in y and z: supports())
    check_launch(launch_attention_scores(dt, p, stream_), "attention_scores");
    return prefix + "attention_scores/tiled-16x16";
  }

  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  p.v = in(2);
  p.lse = call.outputs.size() > 1 ? ptr_of(call.outputs[1]) : nullptr;
  if (has(3)) p.slopes = in(3);
  if (has(4)) p.lens = static_cast<const int32_t*>(in(4));
  if (g.varlen) p.cuq = static_cast<const int32_t*>(in(5)), p.cuk = static_cast<const int32_t*>(in(6));
  if (has(7)) p.sinks = in(7);
  if (has(8)) {
    p.bmask = static_cast<const int32_t*>(in(8));
    p.block_size = static_cast<int>(a.block_size);
    p.nkb = static_cast<int>(call.inputs[8].shape[1]);
  }
  set_attn_options(p, a, has(3));

  // The decode kernel (attention_decode.cu attn_decode): one query row per sequence, automatically when the call
  // qualifies and no knob of the flash kernels (attn_path, attn_split, attn_rows) is set; KF_TUNE
  // attn_decode=1 never, attn_decode=2 always (Unsupported, saying why, where it does not apply).
  if (attn_decode_ != 1) {
    const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
    std::string why = plan::decode_refusal(g, a, has(8));  // the rules Vulkan's decode kernel shares
    if (why.empty() && call.dtype == DType::f64) why = "it takes f32, f16 and bf16 only";
    if (why.empty()) why = plan::decode_head_dim_refusal(g.D, vw);
    if (why.empty() && (g.B > 65535 || g.Hkv * ((g.Hq / g.Hkv + 7) / 8) > 65535))
      why = "its grid exceeds 65535 blocks in y or z";
    if (attn_decode_ == 2 && !why.empty())
      throw Error(ErrorCode::Unsupported, prefix + " attention: the decode kernel was forced (KF_TUNE attn_decode=2) but " + why);
    const bool flash_knobs = attn_path_ != 0 || attn_split_ != 0 || attn_rows_ != 0;
    if (why.empty() && (attn_decode_ == 2 || !flash_knobs)) {
      // Query heads a block: up to 8 (KF_TUNE attn_decode_heads=1|2|4|8 caps it lower: K and V are then
      // read once per chunk of heads, with fewer registers a block).
      const int64_t max_heads = attn_decode_heads_ ? attn_decode_heads_ : 8;
      const plan::DecodeShape ds = plan::decode_shape(g.D, vw, g.Hq / g.Hkv, max_heads);
      const int lk = ds.lanes;
      p.dec_lk = lk;
      p.dec_ppl = ds.packs_per_lane;
      p.dec_nchunk = ds.nchunk;
      p.dec_ng = ds.heads;
      p.dec_gc = 1;
      while (p.dec_gc < p.dec_ng) p.dec_gc *= 2;
      p.dec_rs = attn_decode_rs_ != 1;
      // Key splits (plan::decode_split): one wave of the blocks the multiprocessors hold (at most 8 each),
      // each split a whole number of the block's steps (128 / lk key groups x 4 keys).
      const int64_t base = g.B * g.Hkv * p.dec_nchunk;
      const int64_t per_sm = std::clamp(attn_decode_blocks_per_sm(dt, p), 1, 8);
      const plan::KeySplit ks = plan::decode_split(g.SkT, base, int64_t(sm_count_) * per_sm, (128 / lk) * 4, attn_split_);
      const int64_t nsplit = ks.n, split_len = ks.len;
      p.nsplit = static_cast<int>(nsplit);
      p.split_len = static_cast<int>(split_len);
      std::shared_ptr<Buffer> part = scratch(static_cast<size_t>(nsplit * g.B * g.Hq * (g.D + 2) * 4));
      p.part = ptr_of(part);
      if (a.rope) {  // the tiled kernels' table (keys 0 .. Sk - 1, the query at Sk - 1), read in the kernel
        const plan::RopePositions rp = plan::rope_positions(g);
        int64_t first = 0;
        p.rope = ptr_of(rope_table(g.D, a.rope_base, rp.pmin, rp.npos, false, &first));
        p.rope_pos0 = static_cast<int>(-first);
      }
      check_launch(launch_attention(AttnKernel::Decode, dt, p, 0, 0, 0, stream_), "attention");
      return prefix + "attention/decode,lk=" + std::to_string(lk) + ",heads=" + std::to_string(p.dec_ng) +
             (p.dec_nchunk > 1 ? "x" + std::to_string(p.dec_nchunk) : std::string()) + ",split=" + std::to_string(nsplit) +
             "x" + std::to_string(split_len) + (attn_decode_rs_form(p) ? ",reduce-scatter" : "") +
             (a.rope == 1 ? ",rope=half" : a.rope == 2 ? ",rope=interleaved" : "");
    }
  }

  // The kernel and its tile.
  const int64_t D = g.D, rows_needed = (g.Hq / g.Hkv) * g.SqT;
  const int wmma_bk = D > 128 ? 32 : 64;
  std::string no_wmma;
  if (!attn_wmma_built()) no_wmma = "this build has no tensor-core attention kernel (HIP)";
  else if (call.dtype != DType::f16 && call.dtype != DType::bf16) no_wmma = "it takes f16 and bf16 only";
  else if (D % 16 != 0) no_wmma = "it needs a head dimension that is a multiple of 16 (got " + std::to_string(D) + ")";
  else if (attn_wmma_shared_bytes(wmma_bk, static_cast<int>(D)) > max_shared_optin_)
    no_wmma = "its " + std::to_string(attn_wmma_shared_bytes(wmma_bk, static_cast<int>(D))) +
              " bytes of shared memory exceed the device's " + std::to_string(max_shared_optin_);
  if (attn_path_ == 2 && !no_wmma.empty())
    throw Error(ErrorCode::Unsupported, prefix + " attention: the tensor-core path was forced (KF_TUNE attn_path=2) but " + no_wmma);
  const bool wmma = no_wmma.empty() && (attn_path_ == 2 || (attn_path_ == 0 && rows_needed >= 32));
  // Which tensor-core kernel: flash-mma (the FlashAttention-2 kernel) where it applies unless
  // KF_TUNE attn_wmma=regs or smem names a wmma kernel; attn_wmma=mma forces it.
  // Its rows per warp: 32 (128 query rows a block, two row tiles a warp sharing each K / V fragment:
  // FlashAttention-2's layout; the default: 1.07-1.2x faster than 16 on an H100 once the softmax was
  // lean) or KF_TUNE attn_rows_per_warp=16 (64 rows a block).
  const int mma_rw = attn_rows_per_warp_ == 16 ? 16 : 32;
  std::string no_mma;
  if (D != 64 && D != 128) no_mma = "it takes head dimensions 64 and 128 only (got " + std::to_string(D) + ")";
  else if (a.rope) no_mma = "it does not apply RoPE";
  else if (attn_mma_shared_bytes(static_cast<int>(D), mma_rw) > max_shared_optin_)
    no_mma = "its " + std::to_string(attn_mma_shared_bytes(static_cast<int>(D), mma_rw)) +
             " bytes of shared memory exceed the device's " + std::to_string(max_shared_optin_);
  if (wmma && attn_wmma_mode_ == 3 && !no_mma.empty())
    throw Error(ErrorCode::Unsupported, prefix + " attention: the FlashAttention-2 kernel was forced (KF_TUNE attn_wmma=mma) but " + no_mma);
  const bool mma = wmma && no_mma.empty() && (attn_wmma_mode_ == 0 || attn_wmma_mode_ == 3);
  // flash-wgmma (attention_wgmma.cu: Hopper's warpgroup instructions) ahead of flash-mma where the
  // device is sm_90 and the build has its sm_90a code: f16 / bf16, no RoPE, soft-capping, ALiBi or block
  // mask, dropout up to D 128; KF_TUNE attn_wmma=wgmma forces it, attn_wmma=mma keeps flash-mma.
  // Head dimensions: multiples of 8 up to 256 (64, 128 and 256 native, the others zero-padded to the next).
  std::string no_wg = D % 8 != 0 || D > 256
                          ? "it takes head dimensions that are multiples of 8 up to 256 (got " + std::to_string(D) + ")"
                          : wgmma_unavailable(cc_);
  if (!no_wg.empty()) {
  } else if (a.rope) no_wg = "it does not apply RoPE";
  else if (p.softcap > 0 || p.alibi || p.bmask) no_wg = "it does not take soft-capping, ALiBi or a block mask";
  else if (p.dropout && D > 128) no_wg = "it applies dropout at head dimensions up to 128 only";
  else if (attn_wgmma_shared_bytes(static_cast<int>(D)) > max_shared_optin_)
    no_wg = "its " + std::to_string(attn_wgmma_shared_bytes(static_cast<int>(D))) +
            " bytes of shared memory exceed the device's " + std::to_string(max_shared_optin_);
  if (wmma && attn_wmma_mode_ == 4 && !no_wg.empty())
    throw Error(ErrorCode::Unsupported, prefix + " attention: the warpgroup kernel was forced (KF_TUNE attn_wmma=wgmma) but " + no_wg);
  const bool wg = wmma && no_wg.empty() && (attn_wmma_mode_ == 0 || attn_wmma_mode_ == 4);
  int bq = 0, bk = 0;
  if (wg) {
    bq = 128, bk = D > 128 ? 64 : 128;  // attention_wgmma.cu wg_bn
  } else if (mma) {
    bq = 4 * mma_rw, bk = 64;
  } else if (wmma) {
    bq = 64, bk = wmma_bk;
  } else {
    const int cap = attn_rows_ ? std::max(8, attn_rows_) : rows_needed >= 32 ? 32 : rows_needed >= 16 ? 16 : 8;
    for (int q = 32; q >= 8 && bq == 0; q /= 2) {
      if (q > cap) continue;
      for (int k : {32, 16, 8})
        if (attn_simt_shared_bytes(dt, q, k, static_cast<int>(D)) <= 48 * 1024) {
          bq = q, bk = k;
          break;
        }
    }
    if (bq == 0)  // not reached for D <= 256 (8 x 8 tiles of doubles take 34 KiB)
      throw Error(ErrorCode::Unsupported, prefix + " attention: no tile of the portable kernel fits 48 KiB for D = " +
                                              std::to_string(D));
  }

  // Key splits (the decode path): when the grid has few blocks and there are many keys, about 4 blocks a
  // multiprocessor (plan::flash_split).
  const int64_t qtiles = (rows_needed + bq - 1) / bq;
  const int64_t base_blocks = qtiles * g.Hkv * g.nseq;
  const plan::KeySplit ks = plan::flash_split(g.SkT, base_blocks, 4 * int64_t(sm_count_), bk, attn_split_);
  const int64_t nsplit = ks.n;
  if (nsplit > 1) {
    p.nsplit = static_cast<int>(nsplit);
    p.split_len = static_cast<int>(ks.len);
  }
  if (qtiles > INT32_MAX || g.Hkv > 65535 || g.nseq * nsplit > 65535)
    throw Error(ErrorCode::Unsupported, prefix + " attention: the grid (" + std::to_string(qtiles) + ", " +
                                            std::to_string(g.Hkv) + ", " + std::to_string(g.nseq * nsplit) +
                                            ") exceeds 65535 blocks in y or z");
  const int64_t cs = call.dtype == DType::f64 ? 8 : 4;  // bytes of the compute type
  std::shared_ptr<Buffer> part;
  if (nsplit > 1) {
    part = scratch(static_cast<size_t>(nsplit * g.B * g.Hq * g.SqT * (D + 2) * cs));
    p.part = ptr_of(part);
  }
  if (a.rope) {
    // Positions: keys 0 .. Sk - 1, queries i + Sk - Sq (as low as -Tq for packed sequences).
    const plan::RopePositions rp = plan::rope_positions(g);
    int64_t first = 0;
    p.rope = ptr_of(rope_table(D, a.rope_base, rp.pmin, rp.npos, cs == 8, &first));
    p.rope_pos0 = static_cast<int>(-first);
  }
  // Dropout on flash-wgmma: its keep words drawn ahead by a kernel of their own (no packed sequences; where they
  // take at most 2 GiB) and read by it, instead of drawn on each warp's path; KF_TUNE attn_fwd_bits=1 draws them
  // in the kernel.
  std::shared_ptr<Buffer> ahead;
  if (wg && p.dropout && !g.varlen && attn_fwd_bits_ != 1 && (g.SkT + 63) / 64 <= 65535) {
    const int64_t rows = g.B * g.Hq * g.SqT, bytes = attn_keep_words_bytes(rows, g.SkT);
    if (bytes <= (int64_t(2) << 30)) {
      ahead = scratch(static_cast<size_t>(bytes));
      p.keep_words = static_cast<unsigned*>(ptr_of(ahead)), p.keep_rows = rows, p.keep_ready = 1;
      check_launch(launch_attention_keep_words(p, stream_), "attention");
    }
  }
  const AttnKernel kern = !wmma ? AttnKernel::Simt
                          : wg  ? AttnKernel::Wgmma
                          : mma ? AttnKernel::Mma
                          : attn_wmma_regs_ ? AttnKernel::WmmaRegs
                                            : AttnKernel::Wmma;
  check_launch(launch_attention(kern, dt, p, bq, bk, static_cast<uint32_t>(qtiles), stream_), "attention");
  std::string variant = prefix + "attention/" +
                        (!wmma ? "flash-simt" : wg ? "flash-wgmma" : mma ? "flash-mma" : attn_wmma_regs_ ? "flash-wmma-regs" : "flash-wmma") +
                        ",bq=" + std::to_string(bq) + ",bk=" + std::to_string(bk);
  if (mma && !wg) variant += ",warp_rows=" + std::to_string(mma_rw);
  if (nsplit > 1) variant += ",split=" + std::to_string(nsplit) + "x" + std::to_string(p.split_len);
  if (ahead) variant += ",bits=ahead";
  return variant;
}

// conv2d, conv2d_bn_relu, conv2d_gelu_dropout (conv.cu), the path chosen here and only here:
//  - im2col + cuBLASLt: one group, cuBLASLt loaded, P = OH OW, K = C KH KW and O below 2^31. The column
//    matrix of up to kColBytes of images at a time in a scratch buffer (none for a 1 x 1 convolution of
//    stride 1 without padding: each image [C, H W] is already the matrix), one strided-batched product
//    per chunk (matmul.cpp conv_gemm: the images as batches, the weights' batch stride 0), then the epilogue kernel (train.cu) over y: bias, batch norm, activation,
//    dropout. For f16 / bf16 the product is rounded to the dtype before the epilogue, as linear's.
//  - depthwise (groups == C, automatic choice only): conv.cu's depthwise kernel, where its tile fits
//    shared memory (variant cuda:conv/depthwise,tile=56x28,vpt=8,kw=3,16B-loads,16B-stores).
//  - implicit-mma (automatic choice only): f16 / bf16, one group, K = C KH KW a multiple of 8, not the
//    1 x 1 stride-1 unpadded case: conv.cu's tensor-core implicit GEMM, the epilogue fused (variant
//    cuda:conv/implicit-mma,tile=128x64x32,16B-stores).
//  - direct: everything else (groups) and KF_TUNE conv_path=1 (depthwise too); conv_path=2 forces the
//    cuBLASLt path (Unsupported, saying why, where it does not apply).
// Variants: cuda:conv/direct,tile=64x64 and cuda:conv/im2col-cublaslt,chunk=32 (or ,1x1-no-im2col),
// then +epilogue-kernel, and ,bn-folded for conv2d_bn_relu.
std::string CudaDevice::dispatch_conv(const OpCall& call, Dt dt) {
  constexpr int64_t kColBytes = int64_t(512) << 20;
  const std::string name = op_name(call.id);
  const Attrs& a = call.attrs;
  const std::string prefix = std::string(kBackend) + ":";
  const Shape& xs = call.inputs[0].shape;
  const Shape& ws = call.inputs[1].shape;
  const TensorArg& out = call.outputs[0];
  const bool bn = call.id == OpId::conv2d_bn_relu, gelu_drop = call.id == OpId::conv2d_gelu_dropout;
  auto in = [&](size_t k) -> const void* { return k < call.inputs.size() ? ptr_of(call.inputs[k]) : nullptr; };
  if (call.dtype != DType::f32 && call.dtype != DType::f16 && call.dtype != DType::bf16)
    throw Error(ErrorCode::Unsupported, prefix + " " + name + ": no convolution kernel in " + to_string(call.dtype) +
                                            " (the registry lists f32, f16 and bf16)");
  if (out.numel == 0) return prefix + "conv/empty";

  ConvParams p;
  p.x = in(0), p.w = in(1), p.y = ptr_of(out);
  p.N = xs[0], p.C = xs[1], p.H = xs[2], p.W = xs[3];
  p.O = ws[0], p.KH = ws[2], p.KW = ws[3], p.groups = a.groups;
  p.OH = out.shape[2], p.OW = out.shape[3];
  p.sh = a.stride[0], p.sw = a.stride[1], p.ph = a.padding[0], p.pw = a.padding[1], p.dh = a.dilation[0], p.dw = a.dilation[1];
  const int64_t P = p.OH * p.OW, K = (p.C / p.groups) * p.KH * p.KW, Og = p.O / p.groups;
  EpilogueParams& ep = p.ep;
  ep.y = p.y;
  ep.total = out.numel;
  ep.n = p.O;
  ep.inner = P;
  ep.bias = in(bn ? 6 : 2);
  if (bn) {
    ep.bn_w = in(2), ep.bn_b = in(3), ep.bn_mean = in(4), ep.bn_var = in(5);
    ep.eps = a.eps;
  }
  ep.act = bn ? static_cast<int>(kActRelu) : gelu_drop ? static_cast<int>(kActGelu) : static_cast<int>(a.act);
  if (gelu_drop && a.p > 0) {
    ep.seed_lo = static_cast<uint32_t>(a.seed);
    ep.seed_hi = static_cast<uint32_t>(a.seed >> 32);
    ep.off_lo = static_cast<uint32_t>(a.offset);
    ep.off_hi = static_cast<uint32_t>(a.offset >> 32);
    ep.thr = plan::dropout_threshold(a.p);
    ep.keep_scale = 1.0 / (1.0 - a.p);
  }
  const std::string bn_tag = bn ? ",bn-folded" : "";

  // Depthwise (groups == C: one input plane per output channel) on its own kernel unless a path is forced:
  // a block per tile of output pixels with its input window staged in shared memory (conv.cu
  // conv_depthwise). Its window must fit 48 KiB for one row of outputs; huge kernels or dilations that
  // do not take the direct kernel below.
  if (conv_path_ == 0 && p.groups == p.C) {
    const DwPlan dp = plan_conv_depthwise(dt, p, 48 * 1024);
    if (dp.ok) {
      const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(dp.tiles, 1, INT32_MAX));
      check_launch(launch_conv_depthwise(dt, p, dp, blocks, stream_), "conv " + name);
      return prefix + "conv/depthwise,tile=" + std::to_string(dp.tow) + "x" + std::to_string(dp.toh) +
             (dp.pb > 1 ? ",planes=" + std::to_string(dp.pb) : "") + ",vpt=" + std::to_string(dp.vpt) +
             (dp.kwt ? ",kw=" + std::to_string(dp.kwt) : "") + (dp.vec_load ? ",16B-loads" : "") +
             (dp.vec_store ? ",16B-stores" : "") + bn_tag;
    }
  }

  // f16 / bf16 with one group: the implicit GEMM on tensor cores (conv.cu conv_mma), where it applies,
  // unless a path is forced. A 1 x 1 convolution of stride 1 without padding stays on cuBLASLt (no column
  // matrix there: each image is the product's operand as it stands).
  const bool one_by_one = p.KH == 1 && p.KW == 1 && p.sh == 1 && p.sw == 1 && p.ph == 0 && p.pw == 0;
  if (conv_path_ == 0 && (dt == Dt::f16 || dt == Dt::bf16) && p.groups == 1 && !one_by_one && K % 8 == 0 &&
      reinterpret_cast<uintptr_t>(p.w) % 16 == 0 && p.C * p.H * p.W <= INT32_MAX && P <= INT32_MAX &&
      p.O <= INT32_MAX && p.H + p.ph < 32767 && p.W + p.pw < 32767 && (p.KH - 1) * p.dh < 32768 &&
      (p.KW - 1) * p.dw < 32768 && conv_mma_smem(p) <= max_shared_optin_) {
    const int64_t tiles = ((p.N * P + 127) / 128) * ((p.O + 63) / 64);
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(tiles, 1, INT32_MAX));
    check_launch(launch_conv_mma(dt, p, blocks, stream_), "conv " + name);
    return prefix + "conv/implicit-mma,tile=128x64x32" + std::string(P % 8 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0 ? ",16B-stores" : "") + bn_tag;
  }

  // The path.
  std::string no_lt, why;
  if (p.groups != 1) no_lt = "it takes one group (groups = " + std::to_string(p.groups) + ")";
  else if (!matmul_supported(&why)) no_lt = why;
  else if (P > INT32_MAX || K > INT32_MAX || p.O > INT32_MAX || p.N > INT32_MAX || K == 0)
    no_lt = "it needs OH OW, C KH KW, O and N in [1, 2^31) (got " + std::to_string(P) + ", " + std::to_string(K) +
            ", " + std::to_string(p.O) + ", " + std::to_string(p.N) + ")";
  if (conv_path_ == 2 && !no_lt.empty())
    throw Error(ErrorCode::Unsupported, prefix + " " + name +
                                            ": the im2col + cuBLASLt path was forced (KF_TUNE conv_path=2) but " + no_lt);

  if (no_lt.empty() && conv_path_ != 1) {
    const int64_t es = static_cast<int64_t>(dtype_size(call.dtype));
    ConvGemm g;
    g.dtype = call.dtype;
    g.O = p.O, g.P = P, g.K = K;
    g.w = p.w;
    g.y_step = p.O * P;
    std::string variant = prefix + "conv/im2col-cublaslt";
    if (one_by_one) {  // OH OW = H W, K = C: image n is x + n C H W as it stands
      g.col = p.x, g.col_step = K * P, g.images = p.N, g.y = p.y;
      conv_gemm(g, name);
      variant += ",1x1-no-im2col";
    } else {
      const int64_t per_image = K * P * es;
      const int64_t chunk = std::clamp<int64_t>(kColBytes / per_image, 1, p.N);
      const auto col = scratch(static_cast<size_t>(chunk * per_image));
      for (int64_t n0 = 0; n0 < p.N; n0 += chunk) {
        const int64_t images = std::min(chunk, p.N - n0);
        const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(images * K, 1, int64_t(1) << 30));
        check_launch(launch_im2col(dt, p, n0, images, ptr_of(col), blocks, stream_), "im2col " + name);
        g.col = ptr_of(col), g.col_step = K * P, g.images = images;
        g.y = static_cast<char*>(p.y) + n0 * p.O * P * es;
        conv_gemm(g, name);
      }
      variant += ",chunk=" + std::to_string(chunk);
    }
    if (ep.bias || ep.bn_w || ep.act != kActNone || ep.thr != 0u) {
      const int64_t blocks = std::clamp<int64_t>((out.numel + 255) / 256, 1, int64_t(sm_count_) * 32);
      check_launch(launch_epilogue(dt, ep, static_cast<uint32_t>(blocks), stream_), "epilogue " + name);
      variant += "+epilogue-kernel";
    }
    return variant + bn_tag;
  }

  // The direct kernel: its tile from the channels per group; the grid loops over what it does not cover.
  if (K > INT32_MAX || p.KH * p.KW > INT32_MAX)
    throw Error(ErrorCode::Unsupported, prefix + " " + name + ": " + std::to_string(K) +
                                            " taps per output (C / groups KH KW) exceed the direct kernel's 2^31 - 1");
  const ConvTile tile = Og > 16 ? ConvTile::t64x64 : Og > 4 ? ConvTile::t128x16 : ConvTile::t256x4;
  const int64_t bm = tile == ConvTile::t64x64 ? 64 : tile == ConvTile::t128x16 ? 128 : 256;
  const int64_t bn_ = tile == ConvTile::t64x64 ? 64 : tile == ConvTile::t128x16 ? 16 : 4;
  const int64_t mtiles = (p.N * P + bm - 1) / bm, ytiles = p.groups * ((Og + bn_ - 1) / bn_);
  const uint32_t gx = static_cast<uint32_t>(std::clamp<int64_t>(mtiles, 1, int64_t(1) << 30));
  const uint32_t gy = static_cast<uint32_t>(std::clamp<int64_t>(ytiles, 1, 65535));
  check_launch(launch_conv_direct(dt, p, tile, gx, gy, stream_), "conv " + name);
  return prefix + "conv/direct,tile=" + std::to_string(bm) + "x" + std::to_string(bn_) + bn_tag;
}

// attention_backward (attention_bwd.cu): PRE (D = rowsum(do * o) into a workspace), dK/dV over key tiles,
// dQ over query tiles, as the Vulkan backend's attention_bwd.comp; on the tensor cores (attention_bwd_mma.cu)
// where that applies (f16 / bf16, D 32, 64, 80, 96 or 128, no block mask or RoPE; on sm_90 at D 64 and 128 the
// warpgroup form of its kernels), else
// on the portable kernels (attention_bwd.cu). Their tile (bq, bk) is the largest of
// 16 x 16, 8 x 16, 16 x 8, 8 x 8 whose shared memory fits 48 KiB, else the device's opt-in limit;
// KF_TUNE attn_rows=8 forces 8 x 8 (the knob of the forward's portable kernel).
std::string CudaDevice::dispatch_attention_backward(const OpCall& call, Dt dt) {
  const Attrs& a = call.attrs;
  const std::string prefix = std::string(kBackend) + ":";
  const auto has = [&](size_t k) { return call.inputs.size() > k && call.inputs[k].buffer != nullptr; };
  auto in = [&](size_t k) -> void* { return has(k) ? ptr_of(call.inputs[k]) : nullptr; };
  // The forward's inputs: q, k, v, then the optional ones (backward inputs 6.. are forward inputs 3..).
  std::vector<Shape> fs = {call.inputs[0].shape, call.inputs[1].shape, call.inputs[2].shape};
  for (size_t k = 6; k < call.inputs.size(); ++k) fs.push_back(has(k) ? call.inputs[k].shape : Shape{});
  const plan::AttnGeometry g = plan::attn_geometry(fs);  // (dimensions within 2^31 - 1: supports())
  if (call.outputs[0].numel == 0 && call.outputs[1].numel == 0) return prefix + "attention_backward/empty";
  const int64_t D = g.D, G = g.Hq / g.Hkv;
  const int64_t cs = call.dtype == DType::f64 ? 8 : 4;  // bytes of the compute type

  // The tile: the largest under 48 KiB, else under the opt-in limit.
  int bq = 0, bk = 0;
  for (const int64_t limit : {int64_t(48 * 1024), max_shared_optin_}) {
    for (const auto& [q, k] : {std::pair<int, int>{16, 16}, {8, 16}, {16, 8}, {8, 8}}) {
      if (attn_rows_ == 8 && (q != 8 || k != 8)) continue;
      if (attn_bwd_shared_bytes(dt, q, k, static_cast<int>(D)) <= limit) {
        bq = q, bk = k;
        break;
      }
    }
    if (bq) break;
  }
  if (bq == 0)
    throw Error(ErrorCode::Unsupported, prefix + " attention_backward: head dimension " + std::to_string(D) + " needs " +
                                            std::to_string(attn_bwd_shared_bytes(dt, 8, 8, static_cast<int>(D))) +
                                            " bytes of shared memory; the device offers " + std::to_string(max_shared_optin_));
  const int64_t ktiles = (g.SkT + bk - 1) / bk, qtiles = (G * g.SqT + bq - 1) / bq;
  if (ktiles > INT32_MAX || qtiles > INT32_MAX || g.Hkv > 65535 || g.nseq > 65535)
    throw Error(ErrorCode::Unsupported, prefix + " attention_backward: the grid (" + std::to_string(std::max(ktiles, qtiles)) +
                                            ", " + std::to_string(g.Hkv) + ", " + std::to_string(g.nseq) +
                                            ") exceeds 65535 blocks in y or z");

  AttnBwdParams P;
  AttnParams& p = P.a;
  p.q = in(0), p.k = in(1), p.v = in(2);
  P.o = in(3), P.dout = in(4), P.lse = in(5);
  P.dq = ptr_of(call.outputs[0]), P.dk = ptr_of(call.outputs[1]), P.dv = ptr_of(call.outputs[2]);
  p.B = static_cast<int>(g.B), p.Hq = static_cast<int>(g.Hq), p.Hkv = static_cast<int>(g.Hkv);
  p.SqT = static_cast<int>(g.SqT), p.SkT = static_cast<int>(g.SkT), p.G = static_cast<int>(G);
  p.D = static_cast<int>(D), p.nseq = static_cast<int>(g.nseq);
  p.scale = a.attn_scale != 0 ? a.attn_scale : 1.0 / std::sqrt(double(D));
  if (has(6)) p.slopes = in(6);
  if (has(7)) p.lens = static_cast<const int32_t*>(in(7));
  if (g.varlen) p.cuq = static_cast<const int32_t*>(in(8)), p.cuk = static_cast<const int32_t*>(in(9));
  // input 10 (sinks) enters only through lse
  if (has(11)) {
    p.bmask = static_cast<const int32_t*>(in(11));
    p.block_size = static_cast<int>(a.block_size);
    p.nkb = static_cast<int>(call.inputs[11].shape[1]);
  }
  set_attn_options(p, a, has(6));
  if (a.rope) {  // the forward's table: keys 0 .. Sk - 1, queries i + Sk - Sq (as low as -Tq when packed)
    const plan::RopePositions rp = plan::rope_positions(g);
    int64_t first = 0;
    p.rope = ptr_of(rope_table(D, a.rope_base, rp.pmin, rp.npos, cs == 8, &first));
    p.rope_pos0 = static_cast<int>(-first);
  }
  const std::shared_ptr<Buffer> dsum = scratch(static_cast<size_t>(g.B * g.Hq * g.SqT * cs));
  P.dsum = ptr_of(dsum);
  // Packed sequences need not cover every row and key: what no sequence owns is zero (as the reference).
  if (g.varlen)
    for (size_t k = 0; k < 3; ++k)
      fill_bytes(*call.outputs[k].buffer, 0, static_cast<size_t>(call.outputs[k].numel) * dtype_size(call.dtype));
  // The tensor-core kernels (attention_bwd_mma.cu) where they apply; KF_TUNE attn_path=1 (or attn_rows, the
  // portable tile) keeps the portable ones, attn_path=2 forces them (Unsupported, saying why, where they
  // do not apply).
  std::string no_mma;
  const int64_t mma_bytes = attn_bwd_mma_shared_bytes(static_cast<int>(D));
  if (call.dtype != DType::f16 && call.dtype != DType::bf16) no_mma = "it takes f16 and bf16 only";
  else if (D != 32 && D != 64 && D != 80 && D != 96 && D != 128)
    no_mma = "it takes head dimensions 32, 64, 80, 96 and 128 (D = " + std::to_string(D) + ")";
  else if (p.bmask) no_mma = "it does not take a block mask";
  else if (p.rope_mode) no_mma = "it does not apply RoPE";
  else if (mma_bytes == 0) no_mma = "this build has no tensor-core backward (HIP)";
  else if (cc_ < 80) no_mma = "it needs compute capability 8.0 or newer";
  else if (mma_bytes > max_shared_optin_)
    no_mma = "its " + std::to_string(mma_bytes) + " bytes of shared memory exceed the device's " + std::to_string(max_shared_optin_);
  if (attn_path_ == 2 && !no_mma.empty())
    throw Error(ErrorCode::Unsupported, prefix + " attention_backward: the tensor-core kernel was forced (KF_TUNE attn_path=2) but " + no_mma);
  if (no_mma.empty() && attn_path_ != 1 && (attn_rows_ == 0 || attn_path_ == 2)) {
    // Their warpgroup form (Hopper's wgmma.mma_async) where the device is sm_90 and the build has its sm_90a
    // code, at D 64 and 128; KF_TUNE attn_wmma=wgmma forces it, attn_wmma=mma keeps the mma.sync kernels.
    const int64_t wg_bytes = attn_bwd_wgmma_shared_bytes(static_cast<int>(D));
    std::string no_wg = D != 64 && D != 128 ? "it takes head dimensions 64 and 128 (D = " + std::to_string(D) + ")"
                                            : wgmma_unavailable(cc_);
    if (no_wg.empty() && wg_bytes > max_shared_optin_)
      no_wg = "its " + std::to_string(wg_bytes) + " bytes of shared memory exceed the device's " + std::to_string(max_shared_optin_);
    if (attn_wmma_mode_ == 4 && !no_wg.empty())
      throw Error(ErrorCode::Unsupported, prefix + " attention_backward: the warpgroup kernel was forced (KF_TUNE attn_wmma=wgmma) but " + no_wg);
    const bool wg = no_wg.empty() && attn_wmma_mode_ != 3;
    // Dropout: its keep words drawn by the dK/dV pass and kept for the dQ pass, where they take at most 2 GiB
    // (drawing is most of what dropout costs these kernels); KF_TUNE attn_bwd_bits=1 draws the bits in both
    // passes, =2 keeps them whatever their size. (Drawn ahead by attention_keep.cu for both passes they were
    // no faster on an H100, and the dK/dV kernels spilled.)
    std::shared_ptr<Buffer> kept;
    std::string bits;
    if (p.dropout && attn_bwd_bits_ != 1) {
      const int64_t rows = g.B * g.Hq * g.SqT, bytes = attn_keep_words_bytes(rows, g.SkT);
      if (attn_bwd_bits_ >= 2 || bytes <= (int64_t(2) << 30)) {
        kept = scratch(static_cast<size_t>(bytes));
        p.keep_words = static_cast<unsigned*>(ptr_of(kept)), p.keep_rows = rows;
        bits = ",bits=kept";
      }
    }
    check_launch(launch_attention_backward_pre(dt, P, stream_), "attention_backward");
    if (wg) {
      check_launch(launch_attention_backward_wgmma(dt, P, stream_), "attention_backward");
      return prefix + "attention_backward/flash-wgmma,bq=64,bk=64" + bits;
    }
    check_launch(launch_attention_backward_mma(dt, P, stream_), "attention_backward");
    return prefix + "attention_backward/flash-mma,bq=64,bk=64" + bits;
  }
  check_launch(launch_attention_backward(dt, P, bq, bk, stream_), "attention_backward");
  return prefix + "attention_backward/simt,bq=" + std::to_string(bq) + ",bk=" + std::to_string(bk);
}

// The rotary (cos, sin) table covering npos positions from pmin, in double and rounded once to the compute
// type (float, or double for f64); cached: uploaded only when the cached one does not cover the call
// (plan::rope_table_for: a growing cache rebuilds it rarely). Kernels index it from *first.
std::shared_ptr<Buffer> CudaDevice::rope_table(int64_t D, double base, int64_t pmin, int64_t npos, bool f64,
                                               int64_t* first) {
  const plan::RopeTable t = plan::rope_table_for(rope_table_ ? rope_span_ : plan::RopeTable{}, {D, base, f64, pmin, npos});
  if (!rope_table_ || t.pmin != rope_span_.pmin || t.npos != rope_span_.npos || t.D != rope_span_.D ||
      t.base != rope_span_.base || t.f64 != rope_span_.f64) {
    const int64_t half = D / 2;
    std::vector<double> td(static_cast<size_t>(t.npos * half * 2));
    for (int64_t q = 0; q < t.npos; ++q)
      for (int64_t d = 0; d < half; ++d) {
        const double theta = double(q + t.pmin) * std::pow(base, -2.0 * double(d) / double(D));
        td[size_t((q * half + d) * 2)] = std::cos(theta);
        td[size_t((q * half + d) * 2 + 1)] = std::sin(theta);
      }
    if (f64) {
      rope_table_ = allocate(td.size() * 8);
      upload(*rope_table_, td.data(), td.size() * 8);
    } else {
      const std::vector<float> tf(td.begin(), td.end());
      rope_table_ = allocate(tf.size() * 4);
      upload(*rope_table_, tf.data(), tf.size() * 4);
    }
    rope_span_ = t;
  }
  *first = rope_span_.pmin;
  return rope_table_;
}

bool CudaDevice::supports(const OpCall& call, std::string* why) const {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  // (no string is built unless the answer is no: dispatch() asks this for every call)
  const char* api = kBackend == std::string_view("hip") ? "HIP" : "CUDA";
  const char* name = op_name(call.id);
  const Entry& e = entry_of(call.id);
  if (!e.signature) return no(std::string("no ") + api + " kernel for " + name + " yet");
  Dt dt;
  if (!dt_of(call.dtype, &dt)) return no(std::string("no ") + api + " kernel for " + name + " in " + to_string(call.dtype));
  if ((e.kern == Kern::Matmul || e.kern == Kern::Lce) && !matmul_supported(why)) return false;
  if (call.outputs.empty()) return true;  // the op-and-dtype question
  const std::string reason = call_refusal(call, e);
  if (!reason.empty()) return no(reason);
  return true;
}

Variant CudaDevice::dispatch(const OpCall& call) {
  const Entry& entry = entry_of(call.id);
  const char* name = op_name(call.id);
  Dt dt = Dt::f32;
  dt_of(call.dtype, &dt);
  const int64_t vw = 16 / static_cast<int64_t>(dtype_size(call.dtype));
  const TensorArg& out = call.outputs[0];
  const std::string prefix = std::string(kBackend) + ":";
  // What the call alone rules out was refused before: Context::run asks supports(call) first.
  make_current();

  if (entry.kern != Kern::Eltwise && entry.kern != Kern::Rows)
    return dispatch_training(call, static_cast<int>(entry.kern), entry.id, dt);

  if (entry.kern == Kern::Eltwise) {
    EltwiseParams p;
    p.n = out.numel;
    p.feat = out.shape.empty() ? 1 : std::max<int64_t>(1, out.shape.back());
    if (p.n == 0) return prefix + "eltwise/empty";
    // swiglu and geglu without 'gate': x holds both halves
    const bool packed = (call.id == OpId::swiglu || call.id == OpId::geglu) && call.inputs.size() > 1 &&
                        !call.inputs[1].buffer;
    p.mode1 = packed ? kAbsent : (call.inputs.size() > 1 ? mode_of(call.inputs[1], p.n) : kAbsent);
    p.mode2 = call.inputs.size() > 2 ? mode_of(call.inputs[2], p.n) : kAbsent;
    p.packed = packed;
    p.gather = (packed || p.mode1 == kFeatures || p.mode2 == kFeatures) && p.feat % vw != 0;
    p.in0 = ptr_of(call.inputs[0]);
    if (call.inputs.size() > 1) p.in1 = ptr_of(call.inputs[1]);
    if (call.inputs.size() > 2) p.in2 = ptr_of(call.inputs[2]);
    p.out = ptr_of(out);
    if (entry.random) {
      p.seed_lo = static_cast<uint32_t>(call.attrs.seed);
      p.seed_hi = static_cast<uint32_t>(call.attrs.seed >> 32);
      p.off_lo = static_cast<uint32_t>(call.attrs.offset);
      p.off_hi = static_cast<uint32_t>(call.attrs.offset >> 32);
      p.thr = plan::dropout_threshold(call.attrs.p);
      p.keep_d = 1.0 / (1.0 - call.attrs.p);
      p.keep_f = static_cast<float>(p.keep_d);
    }
    p.n_d = static_cast<double>(p.n);
    p.n_f = static_cast<float>(p.n);
    const int64_t packs = (p.n + vw - 1) / vw;
    const int64_t tiles = (packs + int64_t(kEltwiseThreads) * kEltwiseItems - 1) / (int64_t(kEltwiseThreads) * kEltwiseItems);
    // Up to 32 blocks per multiprocessor (4 waves of 8 resident blocks); blocks stride over the rest.
    const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>(tiles, 1, int64_t(sm_count_) * 32));
    const int err = launch_eltwise(static_cast<EltOp>(entry.id), dt, p, blocks, stream_);
    if (err != 0) check_launch(err, std::string("eltwise ") + name);  // (the name built only on failure)
    return p.gather ? KF_GPU_BACKEND ":eltwise/gather" : KF_GPU_BACKEND ":eltwise/16B-packs";
  }

  // Row kernels: tpr threads per row, enough that each caches its share of the row (softmax) or reads
  // about two rounds of its unrolled loads (sums); 256-thread blocks, or one 1024-thread block per row
  // for rows longer than 256 threads hold.
  const TensorArg& in = call.inputs[0];
  RowsParams p;
  p.feat = std::max<int64_t>(1, in.shape.empty() ? 1 : in.shape.back());
  p.rows = in.numel / p.feat;
  if (p.rows == 0) return prefix + "rows/empty";
  p.in = ptr_of(in);
  p.out = ptr_of(out);
  p.wide = p.feat % vw == 0;
  p.scale = static_cast<float>(call.attrs.scale);
  p.scale_d = call.attrs.scale;
  const bool sums = entry.id == static_cast<int>(RowOp::sum_squared) || entry.id == static_cast<int>(RowOp::mean_abs);
  const int64_t units = p.wide ? p.feat / vw : p.feat;
  const int64_t per_value = call.dtype == DType::f64 ? 2 : 1;  // f64 caches half as many values
  auto per_thread = [&](int cache_values) -> int64_t {  // units cached per thread (rows.cu rows_kernel)
    if (sums) return 8;
    if (p.wide) return cache_values / 4;  // packs: 16 bytes of registers each (16-bit ones raw)
    return std::max<int64_t>(1, cache_values / per_value);
  };
  const int warp = std::max<int>(1, static_cast<int>(info_.caps.subgroup_size));
  const int cache = rows_values_;
  int block = 256, tpr = warp;
  while (int64_t(tpr) * per_thread(cache) < units && tpr < 256) tpr *= 2;
  if (int64_t(tpr) * per_thread(cache) < units) block = tpr = 1024;
  p.tpr = tpr;
  p.cluster = rows_cluster_, p.cc = cc_, p.smem_limit = max_shared_optin_;
  if (!sums) no_clusters(name);
  const int64_t rpb = block / tpr;
  const uint32_t blocks = static_cast<uint32_t>(std::clamp<int64_t>((p.rows + rpb - 1) / rpb, 1, int64_t(1) << 30));
  ClusterPlan cl;
  check_launch(launch_rows(static_cast<RowOp>(entry.id), dt, p, block, cache, blocks, stream_, &cl), std::string("rows ") + name);
  if (cl.P)  // (tpr: the row's threads, over the cluster)
    return prefix + "rows/warp-shuffle,tpr=" + std::to_string(cl.P * cl.block) + ",block=" + std::to_string(cl.block) +
           ",cluster=" + std::to_string(cl.P) + (cl.smem ? ",smem=" + std::to_string(cl.smem) : "") + ",16B-packs";
  return prefix + "rows/warp-shuffle,tpr=" + std::to_string(tpr) + ",block=" + std::to_string(block) +
         (sums || block == 1024 ? "" : ",cache=" + std::to_string(cache)) + (p.wide ? ",16B-packs" : ",scalar");
}

}  // namespace kf::hal::cuda
