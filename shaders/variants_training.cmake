# Shader variants of docs/ops.md sections 3 and 6 (included by variants.cmake). Names:
# <family>_<op>_<dtype>[_sg], looked up by hal/vulkan/norm.cpp (training_variant). Ops that need
# exp/tanh/erf have no f64 variant (GLSL has no float64 transcendentals).
set(KF_NORM_OPS layer_norm layer_norm_relu layer_norm_gelu layer_norm_silu rms_norm rms_norm_gelu rms_norm_silu
  add_layer_norm add_rms_norm group_norm)
set(KF_NORM_F64_OPS layer_norm layer_norm_relu rms_norm add_layer_norm add_rms_norm group_norm)

# Row kernels (norm.comp): a subgroup variant and a shared-memory variant of each.
function(kf_row_variants prefix source ops f64_ops)
  foreach(op IN LISTS ops)
    set(dts ${KF_DTYPES})
    if(op IN_LIST f64_ops)
      list(APPEND dts f64)
    endif()
    foreach(dt IN LISTS dts)
      string(TOUPPER ${dt} DT)
      list(APPEND KF_SHADER_VARIANTS "${prefix}_${op}_${dt}|${source}|OP_${op},DT_${DT}")
      list(APPEND KF_SHADER_VARIANTS "${prefix}_${op}_${dt}_sg|${source}|OP_${op},DT_${DT},SUBGROUP")
    endforeach()
  endforeach()
  set(KF_SHADER_VARIANTS ${KF_SHADER_VARIANTS} PARENT_SCOPE)
endfunction()

kf_row_variants(norm norm.comp "${KF_NORM_OPS}" "${KF_NORM_F64_OPS}")

foreach(dt IN LISTS KF_DTYPES ITEMS f64)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "bn_${dt}|batchnorm.comp|DT_${DT}")
endforeach()

# Losses (loss.comp): cross_entropy and its backward need exp/log (no f64); mse has f64.
kf_row_variants(loss loss.comp
  "cross_entropy;cross_entropy_backward;mse;linear_cross_entropy;linear_cross_entropy_backward" "mse")

# Backward elementwise ops on eltwise.comp (GRAD_OP: activations_grad.glsl): dy * act'(x), mse_backward.
set(KF_GRAD_ELTWISE_OPS mse_backward relu_backward sigmoid_backward tanh_backward gelu_backward
  gelu_tanh_backward silu_backward mish_backward)
set(KF_GRAD_ELTWISE_F64_OPS mse_backward relu_backward)
foreach(op IN LISTS KF_GRAD_ELTWISE_OPS)
  set(dts ${KF_DTYPES})
  if(op IN_LIST KF_GRAD_ELTWISE_F64_OPS)
    list(APPEND dts f64)
  endif()
  foreach(dt IN LISTS dts)
    string(TOUPPER ${dt} DT)
    list(APPEND KF_SHADER_VARIANTS "eltwise_${op}_${dt}|eltwise.comp|OP_${op},DT_${DT},GRAD_OP")
  endforeach()
endforeach()

# dropout_backward is dropout applied to dy (the same Philox mask): eltwise.comp's dropout kernel.
foreach(dt IN LISTS KF_DTYPES ITEMS f64)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "eltwise_dropout_backward_${dt}|eltwise.comp|OP_dropout,DT_${DT}")
endforeach()

# Row backward passes (norm_bwd.comp): softmax, layer norm and rms norm; no exp, so f64 too.
kf_row_variants(normbwd norm_bwd.comp "softmax_backward;layer_norm_backward;rms_norm_backward"
  "softmax_backward;layer_norm_backward;rms_norm_backward")

# Optimizers (optim.comp): no exp, so f64 too.
foreach(op adamw_step sgd_step)
  foreach(dt IN LISTS KF_DTYPES ITEMS f64)
    string(TOUPPER ${dt} DT)
    list(APPEND KF_SHADER_VARIANTS "optim_${op}_${dt}|optim.comp|OP_${op},DT_${DT}")
  endforeach()
endforeach()

# Attention (attention.comp, docs/ops.md section 5): the flash-attention kernel, the combine pass of the
# split path and attention_scores, the decode kernel; no f64 (exp). hal/vulkan/attention.cpp chooses them.
foreach(dt IN LISTS KF_DTYPES)
  string(TOUPPER ${dt} DT)
  list(APPEND KF_SHADER_VARIANTS "attn_${dt}|attention.comp|DT_${DT}")
  list(APPEND KF_SHADER_VARIANTS "attn_combine_${dt}|attention.comp|DT_${DT},COMBINE")
  list(APPEND KF_SHADER_VARIANTS "attn_scores_${dt}|attention.comp|DT_${DT},SCORES")
  # The decode kernel (attention_decode.comp: Sq = 1, K and V streamed once; its partials go through
  # attn_combine_<dt>).
  list(APPEND KF_SHADER_VARIANTS "attn_decode_${dt}|attention_decode.comp|DT_${DT}")
endforeach()
list(APPEND KF_SHADER_VARIANTS "attn_scores_f64|attention.comp|DT_F64,SCORES")
# The tensor-core forward (attention_coopmat.comp, f16, GL_NV_cooperative_matrix), one per head dimension.
if(coopmat_nv_rc EQUAL 0)
  # QUAD: the softmax on the accumulators, for devices whose accumulator layout is m16n8k16's
  # (coopmat_layout.comp finds it on the device).
  foreach(hd 16 32 48 64 80 96 112 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cm_f16_d${hd}|attention_coopmat.comp|HD=${hd}")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_f16_d${hd}|attention_coopmat.comp|HD=${hd},QUAD=1")
  endforeach()
  # Workgroup shapes of the QUAD variant (KF_TUNE attn_cm): 8 subgroups, and K / V prefetched into
  # registers during the previous tile's products (_p).
  foreach(hd 64 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_f16_d${hd}_w8|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_f16_d${hd}_w8p|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u,PREFETCH=1")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_f16_d${hd}_w4p|attention_coopmat.comp|HD=${hd},QUAD=1,PREFETCH=1")
  endforeach()
  list(APPEND KF_SHADER_VARIANTS "coopmat_layout|coopmat_layout.comp|KF_COOPMAT_NV")
  # bf16 on the same kernels: f16 times a power of two per tensor (BF16IN), the largest magnitudes
  # found first and K and V converted by attention_absmax.comp.
  foreach(hd 16 32 48 64 80 96 112 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cm_bf16_d${hd}|attention_coopmat.comp|HD=${hd},BF16IN")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_bf16_d${hd}|attention_coopmat.comp|HD=${hd},QUAD=1,BF16IN")
  endforeach()
  foreach(hd 64 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_bf16_d${hd}_w8|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u,BF16IN")
  endforeach()
  # attention_backward's dK/dV and dQ passes on the tensor cores, f16 and bf16 (as f16 copies times powers
  # of two): generic (D 64 and 128) and QUAD (D 32 to 128).
  foreach(hd 64 128)
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_dkv_d${hd}|attention_bwd_coopmat.comp|HD=${hd},DKV")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_dq_d${hd}|attention_bwd_coopmat.comp|HD=${hd},DQ")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_dkv_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},DKV,BF16IN")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_dq_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},DQ,BF16IN")
  endforeach()
  foreach(hd 32 64 80 96 128)
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_dkv_d${hd}|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DKV")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_dq_d${hd}|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DQ")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_dkv_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DKV,BF16IN")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_dq_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DQ,BF16IN")
  endforeach()
  list(APPEND KF_SHADER_VARIANTS "attn_absmax_bf16|attention_absmax.comp|KF_ABSMAX")
  list(APPEND KF_SHADER_VARIANTS "attn_to_f16_bf16|attention_absmax.comp|CONVERT")
endif()
# The tensor-core forward and backward through GL_KHR_cooperative_matrix (the glslang of
# tools/install-deps.sh), 16x16x16 fragments: the generic forms for any device, and the QUAD forms for
# devices whose accumulators and A operands share the quad layout element by element (KHR has no
# conversion between uses; coopmat_khr_layout finds the layouts on the device).
if(KF_KHR_SHADERS)
  foreach(hd 16 32 48 64 80 96 112 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cm_khr_f16_d${hd}|attention_coopmat.comp|HD=${hd},KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_cm_khr_bf16_d${hd}|attention_coopmat.comp|HD=${hd},BF16IN,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_f16_d${hd}|attention_coopmat.comp|HD=${hd},QUAD=1,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_bf16_d${hd}|attention_coopmat.comp|HD=${hd},QUAD=1,BF16IN,KF_COOPMAT_KHR")
  endforeach()
  foreach(hd 64 128 256)
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_f16_d${hd}_w8|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_bf16_d${hd}_w8|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u,BF16IN,KF_COOPMAT_KHR")
  endforeach()
  list(APPEND KF_SHADER_VARIANTS "coopmat_khr_layout|coopmat_layout.comp|KF_COOPMAT_KHR")
  # bf16 as bf16 on bf16 cooperative matrices (BF16N, KF_COOPMAT_BF16: slang's glslang), the QUAD forms:
  # no staging passes.
  if(KF_BF16_SHADERS)
    foreach(hd 16 32 48 64 80 96 112 128 256)
      list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_bf16n_d${hd}|attention_coopmat.comp|HD=${hd},QUAD=1,BF16N,KF_COOPMAT_KHR,KF_COOPMAT_BF16")
    endforeach()
    foreach(hd 64 128 256)
      list(APPEND KF_SHADER_VARIANTS "attn_cmq_khr_bf16n_d${hd}_w8|attention_coopmat.comp|HD=${hd},QUAD=1,NW=8u,BF16N,KF_COOPMAT_KHR,KF_COOPMAT_BF16")
    endforeach()
    foreach(hd 32 64 80 96 128)
      list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dkv_d${hd}_bf16n|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DKV,BF16N,KF_COOPMAT_KHR,KF_COOPMAT_BF16")
      list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dq_d${hd}_bf16n|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DQ,BF16N,KF_COOPMAT_KHR,KF_COOPMAT_BF16")
    endforeach()
  endif()
  foreach(hd 32 64 80 96 128)
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dkv_d${hd}|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DKV,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dq_d${hd}|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DQ,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dkv_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DKV,BF16IN,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cmq_khr_dq_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},QUAD=1,DQ,BF16IN,KF_COOPMAT_KHR")
  endforeach()
  # attention_backward's dK/dV and dQ passes, the generic form (f16 and bf16 as f16 copies times powers of
  # two, D 64 and 128).
  foreach(hd 64 128)
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_khr_dkv_d${hd}|attention_bwd_coopmat.comp|HD=${hd},DKV,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_khr_dq_d${hd}|attention_bwd_coopmat.comp|HD=${hd},DQ,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_khr_dkv_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},DKV,BF16IN,KF_COOPMAT_KHR")
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_cm_khr_dq_d${hd}_bf16|attention_bwd_coopmat.comp|HD=${hd},DQ,BF16IN,KF_COOPMAT_KHR")
  endforeach()
  if(NOT coopmat_nv_rc EQUAL 0)  # bf16's staging, otherwise listed with the NV variants
    list(APPEND KF_SHADER_VARIANTS "attn_absmax_bf16|attention_absmax.comp|KF_ABSMAX")
    list(APPEND KF_SHADER_VARIANTS "attn_to_f16_bf16|attention_absmax.comp|CONVERT")
  endif()
else()
  list(APPEND kf_khr_left_out "attn_cm_khr_*, attn_bwd_cm_khr_* (attention, attention_backward)")
endif()
# attention_backward (attention_bwd.comp): the D / lse / do pass, then dk and dv, then dq.
foreach(dt IN LISTS KF_DTYPES)
  string(TOUPPER ${dt} DT)
  foreach(pass pre dkv dq)
    string(TOUPPER ${pass} PASS)
    list(APPEND KF_SHADER_VARIANTS "attn_bwd_${pass}_${dt}|attention_bwd.comp|DT_${DT},${PASS}")
  endforeach()
endforeach()
