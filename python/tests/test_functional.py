# The typed functions (kernelfusion.functional) on the CPU backend: each against NumPy written out here,
# or, where the formula is long, against the registry op it maps to with the raw attributes, so that the
# mapping of every option is checked. Small shapes: the whole file runs in about a second.
import math
import os

import numpy as np
import pytest

import kernelfusion as kf
import kernelfusion.functional as F

RNG = np.random.default_rng(20261127)


def rand(*shape, dtype=np.float64):
    return RNG.standard_normal(shape).astype(dtype)


def np_act(name, z):
    if name in (None, "none"):
        return z
    if name == "relu":
        return np.maximum(z, 0)
    if name == "silu":
        return z / (1 + np.exp(-z))
    if name == "gelu":
        return 0.5 * z * (1 + np.vectorize(math.erf)(z / math.sqrt(2)))
    raise ValueError(name)


@pytest.fixture(autouse=True)
def on_cpu(cpu):
    previous = kf.default_context()
    kf.set_default_context(cpu)
    yield
    kf.set_default_context(previous)


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_linear(act):
    x, W, b, r = rand(2, 3, 8), rand(5, 8), rand(5), rand(2, 3, 5)
    np.testing.assert_allclose(F.linear(x, W, b, r, act=act), np_act(act, x @ W.T + b) + r, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(F.linear(x, W), x @ W.T, rtol=1e-10)


def test_linear_out_dtype_and_dropout():
    x, W = rand(4, 8, dtype=np.float16), rand(6, 8, dtype=np.float16)
    y = F.linear(x, W, out_dtype="f32")
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, x.astype(np.float32) @ W.astype(np.float32).T, rtol=2e-3, atol=2e-3)
    x, W = rand(4, 8), rand(6, 8)
    y = F.linear(x, W, act="relu", dropout_p=0.5, seed=3, offset=1)
    np.testing.assert_array_equal(y, kf.ops.linear_dropout(x, W, act=1, p=0.5, seed=3, offset=1))
    kept = y != 0
    np.testing.assert_allclose(y[kept], 2 * np.maximum(x @ W.T, 0)[kept], rtol=1e-10)


def test_matmul_batched_and_shared():
    a, b, bias, res = rand(2, 3, 4), rand(2, 4, 5), rand(5), rand(2, 3, 5)
    np.testing.assert_allclose(F.matmul(a, b, bias, res, act="relu"), np.maximum(a @ b + bias, 0) + res, rtol=1e-10)
    w = rand(4, 5)
    np.testing.assert_allclose(F.matmul(a, w), a @ w, rtol=1e-10)


def test_ffn():
    x, W1, b1, W2, b2 = rand(3, 8), rand(16, 8), rand(16), rand(4, 16), rand(4)
    np.testing.assert_allclose(F.ffn(x, W1, b1, W2, b2, act="gelu"), np_act("gelu", x @ W1.T + b1) @ W2.T + b2,
                               rtol=1e-10)
    Wgu, Wd = rand(12, 8), rand(4, 6)
    h = x @ Wgu.T
    np.testing.assert_allclose(F.ffn_swiglu(x, Wgu, Wd), (h[:, :6] * np_act("silu", h[:, 6:])) @ Wd.T, rtol=1e-10)


def test_embedding_takes_int64_ids():
    table, pos = rand(10, 4), rand(6, 4)
    tokens = np.array([[1, 9, 0], [3, 3, 2]], dtype=np.int64)
    np.testing.assert_array_equal(F.embedding(tokens, table), table[tokens])
    np.testing.assert_allclose(F.embedding(tokens, table, pos), table[tokens] + pos[:3], rtol=1e-15)


def np_attention(q, k, v, scale=None, causal=False, lengths=None):
    B, Hq, Sq, D = q.shape
    rep = Hq // k.shape[1]
    k, v = np.repeat(k, rep, 1), np.repeat(v, rep, 1)
    s = q @ np.swapaxes(k, -1, -2) * (scale or 1 / math.sqrt(D))
    Sk = k.shape[2]
    i, j = np.arange(Sq)[:, None], np.arange(Sk)[None, :]
    if causal:
        s = np.where(j <= i + Sk - Sq, s, -np.inf)
    if lengths is not None:
        s = np.where(j[None, None] < np.asarray(lengths)[:, None, None, None], s, -np.inf)
    m = s.max(-1, keepdims=True)
    e = np.exp(s - m)
    lse = (m + np.log(e.sum(-1, keepdims=True)))[..., 0]
    return (e / e.sum(-1, keepdims=True)) @ v, lse


@pytest.mark.parametrize("causal", [False, True])
def test_attention_gqa(causal):
    q, k, v = rand(2, 4, 5, 8), rand(2, 2, 7, 8), rand(2, 2, 7, 8)
    o_ref, lse_ref = np_attention(q, k, v, scale=0.3, causal=causal)
    o, lse = F.attention(q, k, v, scale=0.3, causal=causal, return_lse=True)
    np.testing.assert_allclose(o, o_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(lse, lse_ref, rtol=1e-10)
    np.testing.assert_allclose(F.attention(q, k, v), np_attention(q, k, v)[0], rtol=1e-10, atol=1e-12)


def test_attention_options_map_to_attrs():
    q, k, v = rand(2, 2, 4, 8), rand(2, 2, 6, 8), rand(2, 2, 6, 8)
    slopes, lengths = np.array([0.5, 0.25]), np.array([5, 6], dtype=np.int64)
    o = F.attention(q, k, v, scale=0.2, causal=True, window=3, alibi=slopes, softcap=5.0, rope="half",
                    rope_base=500.0, key_lengths=lengths, dropout_p=0.25, seed=11, offset=2,
                    score_mod="score - 0.1 * float(i)")
    raw = kf.ops.attention(q, k, v, slopes, lengths.astype(np.int32), attn_scale=0.2, causal=True, window=3,
                           softcap=5.0, rope=1, rope_base=500.0, p=0.25, seed=11, offset=2,
                           score_mod="score - 0.1 * float(i)")
    np.testing.assert_array_equal(o, raw)
    o2 = F.attention(q, k, v, alibi=True, rope="interleaved")
    np.testing.assert_array_equal(o2, kf.ops.attention(q, k, v, alibi=True, rope=2))


def test_attention_backward_and_scores():
    q, k, v = rand(1, 2, 3, 8), rand(1, 2, 4, 8), rand(1, 2, 4, 8)
    o, lse = F.attention(q, k, v, causal=True, return_lse=True)
    do = rand(1, 2, 3, 8)
    dq, dk, dv = F.attention_backward(q, k, v, o, do, lse, causal=True)
    # dv = P^T do with P the probabilities
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(8)
    s = np.where(np.arange(4)[None, :] <= np.arange(3)[:, None] + 1, s, -np.inf)
    p = np.exp(s - lse[..., None])
    np.testing.assert_allclose(dv, np.swapaxes(p, -1, -2) @ do, rtol=1e-10, atol=1e-12)
    assert dq.shape == q.shape and dk.shape == k.shape
    np.testing.assert_allclose(F.attention_scores(q, k, scale=0.5), 0.5 * q @ np.swapaxes(k, -1, -2), rtol=1e-12)


def test_decode_against_cache_lengths():
    q, kc, vc = rand(2, 4, 8), rand(2, 2, 9, 8), rand(2, 2, 9, 8)
    lengths = np.array([9, 4], dtype=np.int32)
    o = F.decode(q, kc, vc, lengths)
    assert o.shape == (2, 4, 8)
    ref, _ = np_attention(q[:, :, None], kc, vc, lengths=lengths)
    np.testing.assert_allclose(o, ref[:, :, 0], rtol=1e-10, atol=1e-12)
    with pytest.raises(kf.InvalidArgumentError, match="decode: argument 'q'"):
        F.decode(rand(2, 4, 3, 8), kc, vc)


def np_conv2d(x, w, b, stride, padding, dilation, groups):
    N, C, H, W = x.shape
    O, Cg, KH, KW = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    OH = (H + 2 * padding[0] - dilation[0] * (KH - 1) - 1) // stride[0] + 1
    OW = (W + 2 * padding[1] - dilation[1] * (KW - 1) - 1) // stride[1] + 1
    y = np.zeros((N, O, OH, OW))
    for o in range(O):
        g = o // (O // groups)
        for kh in range(KH):
            for kw in range(KW):
                patch = xp[:, g * Cg:(g + 1) * Cg, kh * dilation[0]:kh * dilation[0] + stride[0] * OH:stride[0],
                           kw * dilation[1]:kw * dilation[1] + stride[1] * OW:stride[1]]
                y[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, kh, kw])
    return y + (0 if b is None else b[None, :, None, None])


def test_conv2d():
    x, w, b = rand(2, 4, 7, 6, dtype=np.float32), rand(6, 2, 3, 3, dtype=np.float32), rand(6, dtype=np.float32)
    y = F.conv2d(x, w, b, stride=(2, 1), padding=1, dilation=(1, 2), groups=2, act="relu")
    ref = np.maximum(np_conv2d(x, w, b, (2, 1), (1, 1), (1, 2), 2), 0)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    bn = [rand(6, dtype=np.float32), rand(6, dtype=np.float32), rand(6, dtype=np.float32),
          np.abs(rand(6, dtype=np.float32)) + 0.5]
    y = F.conv2d_bn_relu(x, w, *bn, conv_bias=b, padding=1, groups=2)
    z = np_conv2d(x, w, b, (1, 1), (1, 1), (1, 1), 2)
    c = lambda t: t[None, :, None, None]  # noqa: E731
    np.testing.assert_allclose(y, np.maximum((z - c(bn[2])) / np.sqrt(c(bn[3]) + 1e-5) * c(bn[0]) + c(bn[1]), 0),
                               rtol=1e-4, atol=1e-4)
    with pytest.raises(kf.InvalidArgumentError, match="stride"):
        F.conv2d(x, w, stride=(1, 2, 3))


def test_depthwise_pointwise_and_gelu_dropout():
    x = rand(1, 3, 5, 5, dtype=np.float32)
    wdw, wpw = rand(3, 1, 3, 3, dtype=np.float32), rand(4, 3, 1, 1, dtype=np.float32)
    y = F.depthwise_pointwise(x, wdw, wpw, stride=2, padding=1, act="relu")
    h = np.maximum(np_conv2d(x, wdw, None, (2, 2), (1, 1), (1, 1), 3), 0)
    np.testing.assert_allclose(y, np.maximum(np_conv2d(h, wpw, None, (1, 1), (0, 0), (1, 1), 1), 0), rtol=1e-4,
                               atol=1e-4)
    w = rand(2, 3, 3, 3, dtype=np.float32)
    np.testing.assert_array_equal(F.conv2d_gelu_dropout(x, w, p=0.3, seed=5, padding=1),
                                  kf.ops.conv2d_gelu_dropout(x, w, p=0.3, seed=5, padding=(1, 1)))


@pytest.mark.parametrize("act", [None, "relu", "gelu", "silu"])
def test_layer_norm(act):
    x, w, b = rand(3, 16), rand(16), rand(16)
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ref = np_act(act, (x - mu) / np.sqrt(var + 1e-5) * w + b)
    np.testing.assert_allclose(F.layer_norm(x, w, b, act=act), ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("act", [None, "gelu", "silu"])
def test_rms_norm(act):
    x, w = rand(3, 16), rand(16)
    ref = np_act(act, x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-3) * w)
    np.testing.assert_allclose(F.rms_norm(x, w, eps=1e-3, act=act), ref, rtol=1e-10, atol=1e-12)
    with pytest.raises(kf.InvalidArgumentError, match="rms_norm: argument 'act'"):
        F.rms_norm(x, act="relu")


def test_add_norms_group_and_batch_norm():
    x, r, w, b = rand(2, 8), rand(2, 8), rand(8), rand(8)
    s, y = F.add_layer_norm(x, r, w, b)
    np.testing.assert_allclose(s, x + r, rtol=1e-15)
    np.testing.assert_allclose(y, F.layer_norm(x + r, w, b), rtol=1e-10)
    s, y = F.add_rms_norm(x, r, w)
    np.testing.assert_allclose(y, F.rms_norm(x + r, w), rtol=1e-10)
    x4 = rand(2, 6, 3, 2)
    y = F.group_norm(x4, 3)
    g = x4.reshape(2, 3, -1)
    ref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)).reshape(x4.shape)
    np.testing.assert_allclose(y, ref, rtol=1e-10, atol=1e-12)
    w6, b6, m6, v6 = rand(6), rand(6), rand(6), np.abs(rand(6)) + 0.1
    c = lambda t: t[None, :, None, None]  # noqa: E731
    np.testing.assert_allclose(F.batch_norm_relu(x4, w6, b6, m6, v6),
                               np.maximum((x4 - c(m6)) / np.sqrt(c(v6) + 1e-5) * c(w6) + c(b6), 0), rtol=1e-10)


def test_norm_backward():
    x, w, dy = rand(3, 8), rand(8), rand(3, 8)
    dx, dw, db = F.layer_norm_backward(dy, x, w)
    xhat = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(db, dy.sum(0), rtol=1e-12)
    np.testing.assert_allclose(dw, (dy * xhat).sum(0), rtol=1e-10)
    g = dy * w
    ref = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / np.sqrt(
        x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(dx, ref, rtol=1e-9, atol=1e-12)
    dx, dw = F.rms_norm_backward(dy, x, w)
    assert dx.shape == x.shape and dw.shape == w.shape


def np_xent(logits, target, ignore_index=-100):
    keep = target != ignore_index
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    return -logp[keep, target[keep]].mean()


def test_cross_entropy_int64_targets():
    logits = rand(6, 5)
    target = np.array([0, 4, -100, 2, 2, 1], dtype=np.int64)
    loss = F.cross_entropy(logits, target)
    assert loss.shape == ()
    np.testing.assert_allclose(loss, np_xent(logits, target), rtol=1e-12)
    loss2, d = F.cross_entropy_backward(logits, target)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    keep = target != -100
    p[np.arange(6)[keep], target[keep]] -= 1
    p[~keep] = 0
    np.testing.assert_allclose(d, p / keep.sum(), rtol=1e-10, atol=1e-15)
    np.testing.assert_allclose(loss2, loss, rtol=1e-14)
    np.testing.assert_allclose(F.cross_entropy(logits, target, label_smoothing=0.1),
                               kf.ops.cross_entropy(logits, target.astype(np.int32), label_smoothing=0.1), rtol=0)


def test_linear_cross_entropy_and_mse():
    h, W = rand(5, 8), rand(7, 8)
    target = np.array([1, 6, 0, 3, 3])
    np.testing.assert_allclose(F.linear_cross_entropy(h, W, target), np_xent(h @ W.T, target), rtol=1e-10)
    loss, dh, dW = F.linear_cross_entropy_backward(h, W, target, softcap=4.0, z_loss=1e-3)
    assert dh.shape == h.shape and dW.shape == W.shape
    np.testing.assert_allclose(loss, F.linear_cross_entropy(h, W, target, softcap=4.0, z_loss=1e-3), rtol=1e-12)
    a, b = rand(4, 3), rand(4, 3)
    np.testing.assert_allclose(F.mse(a, b), ((a - b) ** 2).mean(), rtol=1e-12)
    np.testing.assert_allclose(F.mse_backward(a, b), 2 * (a - b) / a.size, rtol=1e-12)


def np_adamw(p, g, m, v, step, lr, b1, b2, eps, wd):
    p = p * (1 - lr * wd)
    m = b1 * m + (1 - b1) * g
    v = b2 * v + (1 - b2) * g * g
    mhat, vhat = m / (1 - b1 ** step), v / (1 - b2 ** step)
    return p - lr * mhat / (np.sqrt(vhat) + eps), m, v


def test_adamw_in_place():
    ps = [rand(4, 3), rand(5)]
    gs = [rand(4, 3), rand(5)]
    ms = [rand(4, 3) * 0.1, rand(5) * 0.1]
    vs = [np.abs(rand(4, 3)) * 0.1, np.abs(rand(5)) * 0.1]
    refs = [np_adamw(p, g, m, v, 3, 1e-2, 0.9, 0.99, 1e-8, 0.1) for p, g, m, v in zip(ps, gs, ms, vs)]
    addresses = [p.ctypes.data for p in ps]
    F.adamw_step(ps, gs, ms, vs, step=3, lr=1e-2, beta2=0.99, weight_decay=0.1)
    assert [p.ctypes.data for p in ps] == addresses
    for (p, m, v), (rp, rm, rv) in zip(zip(ps, ms, vs), refs):
        np.testing.assert_allclose(p, rp, rtol=1e-12)
        np.testing.assert_allclose(m, rm, rtol=1e-12)
        np.testing.assert_allclose(v, rv, rtol=1e-12)


def test_sgd_in_place():
    p, g, buf = rand(6), rand(6), rand(6)
    ref_buf = 0.9 * buf + g
    ref = p - 0.1 * (g + 0.9 * ref_buf)
    F.sgd_step(p, g, buf, step=2, lr=0.1, momentum=0.9, nesterov=True)
    np.testing.assert_allclose(buf, ref_buf, rtol=1e-12)
    np.testing.assert_allclose(p, ref, rtol=1e-12)


def test_errors_name_the_op():
    with pytest.raises(kf.ShapeError, match="linear"):
        F.linear(rand(2, 8), rand(5, 7))
    with pytest.raises(kf.InvalidArgumentError, match="linear: argument 'act'"):
        F.linear(rand(2, 8), rand(5, 8), act="tanh")
    with pytest.raises(kf.InvalidArgumentError, match="rope"):
        F.attention(rand(1, 1, 2, 8), rand(1, 1, 2, 8), rand(1, 1, 2, 8), rope="sideways")
    p = rand(3)
    before = p.copy()
    with pytest.raises(kf.ShapeError, match="adamw_step"):
        F.adamw_step([p], [rand(4)], [rand(3)], [rand(3)], step=1)
    np.testing.assert_array_equal(p, before)


def test_docstrings_quote_docs_ops_md():
    import kernelfusion._docs as docs
    with open(docs._PATH, encoding="utf-8") as f:
        page = " ".join(f.read().split())
    for name in F.__all__:
        doc = getattr(F, name).__doc__
        assert "From docs/ops.md:" in doc, name
        quoted = doc.split("From docs/ops.md:")[1].split("Registry:")[0]
        for block in filter(None, (b.strip() for b in quoted.split("\n\n"))):
            text = block.split("] ", 1)[1]
            # table rows are re-joined with their headers; bullets and paragraphs appear verbatim
            assert text.split(";")[0] in page, (name, text[:80])
    assert os.path.basename(docs._PATH) == "ops.md"


def test_on_vulkan():
    """A few typed functions on the Vulkan backend (lavapipe without a GPU), in f32, against the CPU's;
    adamw_step there copies the arrays to the device and back."""
    from conftest import vulkan_context
    vk = vulkan_context()
    if vk is None:
        pytest.skip("no Vulkan device")
    f32 = lambda *s: rand(*s, dtype=np.float32)  # noqa: E731
    x, W, b = f32(3, 16), f32(8, 16), f32(8)
    q, k, v = f32(1, 4, 5, 16), f32(1, 2, 5, 16), f32(1, 2, 5, 16)
    target = np.array([1, 0, 7], dtype=np.int64)
    calls = [lambda c: F.linear(x, W, b, act="relu", context=c),
             lambda c: F.layer_norm(x, act="relu", context=c),
             lambda c: F.attention(q, k, v, causal=True, context=c),
             lambda c: F.cross_entropy(F.linear(x, W, context=c), target, context=c)]
    cpu = kf.default_context()
    for call in calls:
        np.testing.assert_allclose(call(vk), call(cpu), rtol=1e-4, atol=1e-5)
    ps = [[f32(4, 3)], [f32(4, 3)], [np.zeros((4, 3), np.float32)], [np.zeros((4, 3), np.float32)]]
    twin = [[a[0].copy()] for a in ps]
    F.adamw_step(*ps, step=1, lr=0.1, context=vk)
    F.adamw_step(*twin, step=1, lr=0.1, context=cpu)
    for a, t in zip(ps, twin):
        np.testing.assert_allclose(a[0], t[0], rtol=1e-5, atol=1e-6)
