"""The GQA benchmark models of bench/bench_config.cpp (gqa, gqa_mha) as transformers'
LlamaForCausalLM, random initialisation (nothing is downloaded), float32 on the CPU, eager or
torch.compile. bench/gqa.sh runs it next to normlab_bench.

    OMP_WAIT_POLICY=PASSIVE python bench/torch_gqa.py train gqa [--compile] [--steps 10] [--warmup 3]
    OMP_WAIT_POLICY=PASSIVE python bench/torch_gqa.py decode gqa [--compile] [--prompt 128] [--tokens 128]

train: the step of bench/torch_bench.py (zero grad, forward, cross-entropy against random targets,
backward, global-norm clipping 1.0, fused AdamW lr 1e-3, betas (0.9, 0.95), eps 1e-8, weight decay
0.1 on the matrices), tokens/s over the timed steps (median step).
decode: batch-1 greedy decoding with a DynamicCache, as normlab_bench decode does: one forward
over the prompt (prefill), then `tokens` single-token forwards, each feeding back the argmax of the
previous logits; prefill and decode tokens/s (medians over --reps repetitions, each with a fresh
cache), and the bytes of the cache's key and value tensors at the end (prompt + tokens positions).

Prints one JSON object; a failure (e.g. of torch.compile) is reported as {"error": ...}.
"""
from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time
import traceback


def rss_mb(key="VmRSS:"):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key):
                return float(line.split()[1]) / 1024.0
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


BASELINE_RSS = rss_mb()

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM  # noqa: E402

IMPORTED_RSS = rss_mb()

# The same shapes as bench_config("gqa") / ("gqa_mha") in bench/bench_config.cpp.
CONFIGS = {
    "gqa": dict(V=2048, C=512, L=6, H=8, KV=2, D=64, Fd=1408, T=256, B=4),
    "gqa_mha": dict(V=2048, C=512, L=6, H=8, KV=8, D=64, Fd=1408, T=256, B=4),
    "gqa_smoke": dict(V=64, C=32, L=2, H=4, KV=2, D=8, Fd=64, T=32, B=2),
}


def llama_config(c):
    return LlamaConfig(
        vocab_size=c["V"], hidden_size=c["C"], intermediate_size=c["Fd"],
        num_hidden_layers=c["L"], num_attention_heads=c["H"], num_key_value_heads=c["KV"],
        head_dim=c["D"], max_position_embeddings=c["T"], rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=False,
        bos_token_id=None, eos_token_id=None, pad_token_id=None)


def matmul_params(c):
    # q, k, v, o; gate, up, down; the untied LM head (V x C)
    attn = c["C"] * c["H"] * c["D"] * 2 + c["C"] * c["KV"] * c["D"] * 2
    return c["L"] * (attn + 3 * c["C"] * c["Fd"]) + c["V"] * c["C"]


def flops_per_token(c):
    # as normlab_bench: 6 x matmul weights + 12 x L x T x (H x D) (QK^T and PV, fwd and bwd)
    return 6.0 * matmul_params(c) + 12.0 * c["L"] * c["T"] * c["H"] * c["D"]


def run_train(model, c, a, out):
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, fused=True)
        out["adamw"] = "fused"
    except Exception:  # noqa: BLE001
        opt = torch.optim.AdamW(groups, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, foreach=True)
        out["adamw"] = "foreach"
    model.train()

    def loss_fn(idx, tgt):
        logits = model(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), tgt.view(-1))

    fwd = torch.compile(loss_fn) if a.compile else loss_fn
    g = torch.Generator().manual_seed(42)
    ms, losses, t_first = [], [], None
    for s in range(a.warmup + a.steps):
        idx = torch.randint(0, c["V"], (c["B"], c["T"]), generator=g)
        tgt = torch.randint(0, c["V"], (c["B"], c["T"]), generator=g)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = fwd(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0, foreach=True)
        opt.step()
        dt = (time.perf_counter() - t0) * 1e3
        if s == 0:
            t_first = dt
        losses.append(loss.item())
        if s >= a.warmup:
            ms.append(dt)
    step = statistics.median(ms)
    n = c["B"] * c["T"]
    out.update(tokens_per_step=n, flops_per_token=flops_per_token(c), steps=a.steps,
               warmup=a.warmup, step_ms=ms, step_ms_median=step, first_step_ms=t_first,
               tokens_per_s=n / (step / 1e3), loss_first=losses[0], loss_last=losses[-1])
    out["gflops"] = out["flops_per_token"] * out["tokens_per_s"] / 1e9


def cache_bytes(cache):
    total = 0
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            if t is not None:
                total += t.numel() * t.element_size()
    return total


def run_decode(model, c, a, out):
    if a.prompt < 1 or a.tokens < 1 or a.prompt + a.tokens > c["T"]:
        raise ValueError(f"--prompt {a.prompt} + --tokens {a.tokens} must fit T = {c['T']}")
    model.eval()
    fwd = torch.compile(model) if a.compile else model
    g = torch.Generator().manual_seed(7)
    prompt = torch.randint(0, c["V"], (1, a.prompt), generator=g)
    pre_ms, dec_ms, first = [], [], None
    generated, kv = None, None
    with torch.inference_mode():
        for rep in range(a.warmup_reps + a.reps):
            cache = DynamicCache(config=model.config)
            t0 = time.perf_counter()
            logits = fwd(input_ids=prompt, cache=cache, use_cache=True).logits
            tok = logits[:, -1].argmax(dim=-1, keepdim=True)
            t1 = time.perf_counter()
            toks = [int(tok)]
            for _ in range(a.tokens):
                logits = fwd(input_ids=tok, cache=cache, use_cache=True).logits
                tok = logits[:, -1].argmax(dim=-1, keepdim=True)
                toks.append(int(tok))
            t2 = time.perf_counter()
            if first is None:
                first = (t2 - t0) * 1e3
            if rep >= a.warmup_reps:
                pre_ms.append((t1 - t0) * 1e3)
                dec_ms.append((t2 - t1) * 1e3)
            if generated is None:
                generated = toks
            elif toks != generated:
                raise RuntimeError("greedy decoding differs between repetitions")
            kv = cache_bytes(cache)
            if cache.get_seq_length() != a.prompt + a.tokens:
                raise RuntimeError(f"cache holds {cache.get_seq_length()} positions")
    p, d = statistics.median(pre_ms), statistics.median(dec_ms)
    out.update(prompt=a.prompt, tokens=a.tokens, reps=a.reps, warmup_reps=a.warmup_reps,
               prefill_ms=pre_ms, decode_ms=dec_ms, prefill_ms_median=p, decode_ms_median=d,
               first_rep_ms=first, prefill_tokens_per_s=a.prompt / (p / 1e3),
               decode_tokens_per_s=a.tokens / (d / 1e3), kv_cache_bytes=kv,
               kv_cache_positions=a.prompt + a.tokens, generated_head=generated[:8])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["train", "decode"])
    ap.add_argument("config", choices=sorted(CONFIGS))
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup-reps", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    c = CONFIGS[a.config]
    out = {"impl": "torch.compile" if a.compile else "torch eager", "mode": a.mode,
           "config": a.config, "torch": torch.__version__, "transformers": transformers.__version__,
           "threads": torch.get_num_threads(), "baseline_rss_mb": BASELINE_RSS,
           "imported_rss_mb": IMPORTED_RSS}
    try:
        model = LlamaForCausalLM(llama_config(c)).float()
        out["attn_implementation"] = model.config._attn_implementation
        out["params"] = sum(p.numel() for p in model.parameters())
        out["matmul_params"] = matmul_params(c)
        if a.mode == "train":
            run_train(model, c, a, out)
        else:
            run_decode(model, c, a, out)
    except Exception as e:  # noqa: BLE001
        out["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:500]
        out["traceback"] = traceback.format_exc()[-2000:]
    out["peak_rss_mb"] = rss_mb("VmHWM:")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
