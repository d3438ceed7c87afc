// Typed entry points for attention (docs/ops.md section 5): attention_scores, attention (decoding
// included) and attention_backward. Each allocates its outputs on the device of its inputs and goes
// through the same checks as Context::run: a rejected call raises kf::Error naming the op and the
// argument, and writes nothing. The options' defaults are those of a default Attrs.
#pragma once
#include <cstdint>
#include <string>

#include "kf/context.hpp"
#include "kf/tensor.hpp"

namespace kf {

// Rotary embedding of q and k inside the kernel (AttentionOptions::rope).
enum RopeLayout : int64_t { kRopeNone = 0, kRopeHalf = 1, kRopeInterleaved = 2 };  // half: GPT-NeoX

// The options of attention and attention_backward (the backward takes the forward's). The tensors are the
// op's optional inputs; an undefined one is left out. Errors name the op's attributes: 'attn_scale' for
// scale, 'p' for dropout_p.
struct AttentionOptions {
  double scale = 0;        // scores = q k^T * scale; 0 means 1 / sqrt(D)
  bool causal = false;     // query i sees key j when j <= i + (Sk - Sq) (bottom-right aligned)
  int64_t window = 0;      // sliding window w > 0: keys with i + (Sk - Sq) - j >= w are masked; 0 = none
  bool alibi = false;      // ALiBi bias with the default slopes (alibi_slopes below turns it on too)
  double softcap = 0;      // logit soft-capping c > 0: score = c tanh(score / c); 0 = off
  RopeLayout rope = kRopeNone;
  double rope_base = 10000;
  // A custom score function of score, b, h, i, j (docs/ops.md section 5), compiled into the kernel at run
  // time; "" = none. Example: "score - 0.05 * float(abs(i - j))".
  std::string score_mod = {};
  double dropout_p = 0;           // dropout on the probabilities, in [0, 1)
  uint64_t seed = 0, offset = 0;  // its Philox key and counter offset
  // The optional inputs (each given a default so that designated initializers may leave it out).
  Tensor alibi_slopes = {};  // [Hq]: per-head ALiBi slopes
  Tensor key_lengths = {};   // i32 [B] (per sequence when packed): keys at or past the length are masked
  // i32 [N + 1]: N packed sequences, with q [1, Hq, Tq, D] and k, v [1, Hkv, Tk, D]
  Tensor cu_seqlens_q = {}, cu_seqlens_k = {};
  Tensor sinks = {};         // [Hq]: a logit per head that joins each row's softmax denominator
  int64_t block_size = 0;    // block-sparse attention: the edge of block_mask's square blocks
  Tensor block_mask = {};    // i32 [ceil(Sq / block_size), ceil(Sk / block_size)]: nonzero blocks are computed
};

// q [B, Hq, Sq, D], k [B, Hkv, Sk, D] (Hq a multiple of Hkv): s = q k^T * scale [B, Hq, Sq, Sk], scale 0
// meaning 1 / sqrt(D) (docs/ops.md section 5).
Tensor attention_scores(const Tensor& q, const Tensor& k, double scale = 0);

// o = softmax(q k^T * scale + bias) v [B, Hq, Sq, D] with v shaped as k (docs/ops.md section 5). Decoding is
// the same call with Sq = 1 (and key_lengths for caches of different lengths).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& options = {});
// The same, also returning the row log-sum-exp lse [B, Hq, Sq] (natural log, the inputs' dtype) that
// attention_backward takes.
struct AttentionWithLse {
  Tensor o, lse;
};
AttentionWithLse attention_with_lse(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionOptions& options = {});

// The gradients of attention given its output o, the output's gradient dout and lse, with the forward's
// options (docs/ops.md section 5). The sinks enter only through lse (their own gradient is not returned).
struct AttentionGrads {
  Tensor dq, dk, dv;
};
AttentionGrads attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& o,
                                  const Tensor& dout, const Tensor& lse, const AttentionOptions& options = {});

}  // namespace kf
