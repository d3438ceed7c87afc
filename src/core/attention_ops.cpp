// Typed entry points of kf/attention.hpp: thin wrappers over Context::call (src/core/typed_call.hpp).
#include "kf/attention.hpp"

#include "core/typed_call.hpp"

namespace kf {
namespace {

Attrs attention_attrs(const AttentionOptions& o, bool lse) {
  Attrs a;
  a.attn_scale = o.scale;
  a.causal = o.causal;
  a.window = o.window;
  a.alibi = o.alibi;
  a.softcap = o.softcap;
  a.rope = o.rope;
  a.rope_base = o.rope_base;
  a.score_mod = o.score_mod;
  a.p = o.dropout_p;
  a.seed = o.seed;
  a.offset = o.offset;
  a.block_size = o.block_size;
  a.return_lse = lse;
  return a;
}

// attention's optional inputs, in the op's order (src/ops/attention.cpp).
std::vector<Tensor> optional_inputs(const AttentionOptions& o) {
  return {o.alibi_slopes, o.key_lengths, o.cu_seqlens_q, o.cu_seqlens_k, o.sinks, o.block_mask};
}

std::vector<Tensor> forward(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o, bool lse) {
  std::vector<Tensor> in = {q, k, v};
  for (const Tensor& t : optional_inputs(o)) in.push_back(t);
  return detail::call_op("attention", std::move(in), attention_attrs(o, lse));
}

}  // namespace

Tensor attention_scores(const Tensor& q, const Tensor& k, double scale) {
  Attrs a;
  a.attn_scale = scale;
  return detail::call_op("attention_scores", {q, k}, a)[0];
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  return forward(q, k, v, o, false)[0];
}

AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o) {
  auto out = forward(q, k, v, o, true);
  return {out[0], out[1]};
}

AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                  const Tensor& dout, const Tensor& lse, const AttentionOptions& options) {
  std::vector<Tensor> in = {q, k, v, o, dout, lse};
  for (const Tensor& t : optional_inputs(options)) in.push_back(t);
  // return_lse is the forward's; the backward ignores it.
  auto out = detail::call_op("attention_backward", std::move(in), attention_attrs(options, false));
  return {out[0], out[1], out[2]};
}

}  // namespace kf
