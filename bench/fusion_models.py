"""End-to-end latency of models converted by kernelfusion.optimize against eager PyTorch and torch.compile,
with the accuracy gate's figures (docs/fusion.md, docs/performance.md).

    PYTHONPATH=build/python python bench/fusion_models.py [--dtypes f16,bf16] [--models minilm,llama-prefill,...]
        [--minilm-dir DIR] [--small]

Models (random weights unless a MiniLM directory is given; --small: tiny sizes for a CPU check):
  minilm         all-MiniLM-L6-v2 (BERT, 6 layers, 384 wide), batch 32 x 128 tokens, mean-pooled embeddings
  llama-prefill  a Llama-style decoder from transformers' LlamaConfig (TinyLlama's shape: 22 layers, 2048
                 wide, 32 query / 4 key-value heads, SwiGLU 5632), batch 1 x 512 tokens, logits
  llama-decode   the same model, one token against a 512-token key/value cache
  resnet18, mobilenet_v2  torchvision, batch 32 x 3 x 224 x 224, eval mode
For each: eager, eager replayed as a CUDA graph, torch.compile (default mode; transformer models only), the
converted model (kf) and the converted model replayed as a CUDA graph (kf graph), median milliseconds over
CUDA events; the sites replaced, reverted by the gate, or left to torch as slower; and the gate's relative
error / cosine / top-1 agreement of the first output against the unconverted model.
"""
import argparse
import copy
import json
import os
import sys
import time
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kernelfusion as kf  # noqa: E402

warnings.filterwarnings("ignore")
DT = {"f16": torch.float16, "bf16": torch.bfloat16, "f32": torch.float32}


class Embed(torch.nn.Module):
    """Sentence embeddings as sentence-transformers makes them: mean over the unmasked tokens, normalized."""

    def __init__(self, bert):
        super().__init__()
        self.bert = bert

    def forward(self, ids, mask):
        h = self.bert(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).to(h.dtype)
        return torch.nn.functional.normalize((h * m).sum(1) / m.sum(1).clamp(min=1e-9), dim=-1)


class DecodeStep(torch.nn.Module):
    """One decoding step of a transformers causal LM against a key/value cache given as tensors."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids, keys, values):
        from transformers import DynamicCache
        cache = DynamicCache(config=self.lm.config)
        for i, (k, v) in enumerate(zip(keys, values)):
            cache.update(k, v, i)
        return self.lm(ids, past_key_values=cache, use_cache=True).logits


def make(name, dtype, device, small, minilm_dir):
    g = torch.Generator().manual_seed(0)
    if name == "minilm":
        from transformers import BertConfig, BertModel
        if minilm_dir:
            bert = BertModel.from_pretrained(minilm_dir)
        else:
            bert = BertModel(BertConfig(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                        intermediate_size=1536))
        b, s = (2, 16) if small else (32, 128)
        ids = torch.randint(0, 30522, (b, s), generator=g)
        mask = torch.ones(b, s, dtype=torch.int64)
        mask[0, s // 2:] = 0  # one padded row
        return Embed(bert), (ids.to(device), mask.to(device))
    if name.startswith("llama"):
        from transformers import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=22,
                          num_attention_heads=32, num_key_value_heads=4, max_position_embeddings=2048)
        if small:
            cfg = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        lm = LlamaForCausalLM(cfg)
        s = 16 if small else 512
        ids = torch.randint(0, cfg.vocab_size, (1, s), generator=g).to(device)
        if name == "llama-prefill":
            return _LM(lm), (ids,)
        hd = cfg.hidden_size // cfg.num_attention_heads
        kv = [torch.randn(1, cfg.num_key_value_heads, s, hd, generator=g).to(device, dtype)
              for _ in range(2 * cfg.num_hidden_layers)]
        nxt = torch.randint(0, cfg.vocab_size, (1, 1), generator=g).to(device)
        return DecodeStep(lm), (nxt, kv[0::2], kv[1::2])
    import torchvision
    b, r = (1, 32) if small else (32, 224)
    model = getattr(torchvision.models, name)()
    # random running statistics and affine parameters: a fresh model's (0, 1, 1, 0) shrink the activations
    # layer by layer until a 16-bit output underflows, which would hide every error
    for mod in model.modules():
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
            mod.running_var.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.weight.data.copy_(torch.rand(mod.num_features, generator=g) + 0.5)
            mod.bias.data.copy_(torch.rand(mod.num_features, generator=g) - 0.5)
    return model, (torch.randn(b, 3, r, r, generator=g).to(device, dtype),)


class _LM(torch.nn.Module):
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, ids):
        return self.lm(ids, use_cache=False).logits


def timed(call, reps, device):
    if device == "cuda":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import cuda_events
        return cuda_events.median_ms(torch, call, 3, reps)
    call()
    t = []
    for _ in range(reps):
        t0 = time.perf_counter()
        call()
        t.append((time.perf_counter() - t0) * 1e3)
    return sorted(t)[len(t) // 2]


def run(name, dtype_name, args, device):
    dtype = DT[dtype_name]
    model, inputs = make(name, dtype, device, args.small, args.minilm_dir)
    model = model.to(device=device, dtype=dtype).eval()
    res = {"model": name, "dtype": dtype_name}
    with torch.no_grad():
        res["eager_ms"] = timed(lambda: model(*inputs), args.reps, device)
        t0 = time.perf_counter()
        conv, report = kf.optimize(model, inputs)
        res["convert_s"] = time.perf_counter() - t0
        for status in ("replaced", "reverted", "slower", "kept"):
            res[status] = report.count(status)
        m = report.outputs[0] if report.outputs else None
        if m is not None:
            res.update(rel=m.rel, cosine=m.cosine, top1=m.top1)
        res["passed"] = report.passed
        res["kf_ms"] = timed(lambda: conv(*inputs), args.reps, device)
        if device == "cuda":
            try:  # the unconverted model replayed as a CUDA graph the same way: what graphs alone give
                eager_graph = kf.fusion.Captured(model)
                eager_graph(*inputs)
                res["eager_graph_ms"] = timed(lambda: eager_graph(*inputs), args.reps, device)
            except Exception as e:  # noqa: BLE001
                res["eager_graph_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
            cap = kf.fusion.Captured(conv)
            try:
                out = cap(*inputs)
                ref = model(*inputs)
                res["graph_rel"] = kf.fusion.gate.compare(kf.fusion.gate.flat(out)[0], kf.fusion.gate.flat(ref)[0]).rel
                res["kf_graph_ms"] = timed(lambda: cap(*inputs), args.reps, device)
            except Exception as e:  # noqa: BLE001 -- reported, the other columns stand
                res["graph_error"] = f"{type(e).__name__}: {e}".splitlines()[0][:300]
        if args.compile and (name == "minilm" or name.startswith("llama")):
            comp = torch.compile(copy.deepcopy(model))
            res["compile_ms"] = timed(lambda: comp(*inputs), args.reps, device)
    if args.verbose:
        print(report, flush=True)
    return res


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--models", default="minilm,llama-prefill,llama-decode,resnet18,mobilenet_v2")
    p.add_argument("--dtypes", default="f16,bf16")
    p.add_argument("--minilm-dir", default=None)
    p.add_argument("--small", action="store_true")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    rows = []
    for name in args.models.split(","):
        for dt in args.dtypes.split(","):
            try:
                r = run(name, dt, args, device)
            except Exception as e:  # noqa: BLE001
                r = {"model": name, "dtype": dt, "error": f"{type(e).__name__}: {e}".splitlines()[0][:300]}
            rows.append(r)
            print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
