"""Tiny PyTorch models and training loops for the normlab.torch.Probe tests: Hugging Face models
built from configs with random weights (nothing is downloaded), a nanoGPT-style GPT, a model
around nn.TransformerEncoder, batches from a fixed random Markov chain, and normlab's learning-rate
schedule (src/train/schedule.cpp) for loops that must match normlab's trainer."""
from __future__ import annotations

import math

import torch
import transformers
from torch import nn
from torch.nn import functional as F

V, B, T = 64, 2, 16
# Tiny models gain nothing from threads, and on a loaded machine OpenMP's waiting threads cost more
# than the work.
torch.set_num_threads(1)


def hf_model(family: str, seed: int = 0, **over) -> nn.Module:
    """A 2-layer model of a Hugging Face family, random weights from `seed`, float32."""
    torch.manual_seed(seed)
    common = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T,
                  tie_word_embeddings=False, rms_norm_eps=1e-5)
    if family == "gpt2":
        cfg = transformers.GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=T,
                                      bos_token_id=0, eos_token_id=0, attn_pdrop=0.0,
                                      resid_pdrop=0.0, embd_pdrop=0.0, **over)
        return transformers.GPT2LMHeadModel(cfg)
    kinds = {"llama": ("LlamaConfig", "LlamaForCausalLM"),
             "mistral": ("MistralConfig", "MistralForCausalLM"),
             "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
             "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
             "gemma2": ("Gemma2Config", "Gemma2ForCausalLM"),
             "gemma3": ("Gemma3TextConfig", "Gemma3ForCausalLM"),
             "olmo2": ("Olmo2Config", "Olmo2ForCausalLM")}
    c, m = kinds[family]
    if family in ("gemma2", "gemma3", "qwen3", "olmo2"):
        common["head_dim"] = 8
    if family in ("gemma2", "gemma3"):
        common.update(query_pre_attn_scalar=8, sliding_window=8)
    if family == "olmo2":
        common.pop("rms_norm_eps")
    # no pad token: nn.Embedding(padding_idx=...) would zero that row and its gradient
    common.update(bos_token_id=0, eos_token_id=0, pad_token_id=None)
    common.update(over)
    return getattr(transformers, m)(getattr(transformers, c)(**common))


class NanoAttention(nn.Module):
    def __init__(self, C: int, H: int) -> None:
        super().__init__()
        self.c_attn, self.c_proj, self.H = nn.Linear(C, 3 * C), nn.Linear(C, C), H

    def forward(self, x):
        Bn, Tn, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(Bn, Tn, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # fused: no scores to hook
        return self.c_proj(y.transpose(1, 2).reshape(Bn, Tn, C))


class NanoBlock(nn.Module):
    def __init__(self, C: int, H: int) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(C), NanoAttention(C, H)
        self.ln_2 = nn.LayerNorm(C)
        self.mlp = nn.Sequential(nn.Linear(C, 4 * C), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * C, C))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT in miniature: transformer.{wte, wpe, h, ln_f}, a tied lm_head."""

    def __init__(self, n_layer: int = 2, C: int = 32, H: int = 4, vocab: int = V, seq: int = T):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, C), wpe=nn.Embedding(seq, C),
            h=nn.ModuleList(NanoBlock(C, H) for _ in range(n_layer)), ln_f=nn.LayerNorm(C)))
        self.lm_head = nn.Linear(C, vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight
        self.config = type("cfg", (), dict(n_head=H, n_embd=C, vocab_size=vocab))()

    def forward(self, idx, targets=None):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[1]))
        for blk in self.transformer.h:
            x = blk(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


class EncoderLM(nn.Module):
    """A causal LM around nn.TransformerEncoder (norm_first: Pre-Norm; else Post-Norm)."""

    def __init__(self, norm_first: bool = True, n_layer: int = 2, C: int = 32, H: int = 4,
                 vocab: int = V):
        super().__init__()
        self.emb = nn.Embedding(vocab, C)
        layer = nn.TransformerEncoderLayer(C, H, 2 * C, dropout=0.0, batch_first=True,
                                           norm_first=norm_first, activation="gelu")
        self.encoder = nn.TransformerEncoder(layer, n_layer, enable_nested_tensor=False)
        self.head = nn.Linear(C, vocab)

    def forward(self, idx, targets):
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        h = self.encoder(self.emb(idx), mask=mask, is_causal=True)
        logits = self.head(h)
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def markov_batches(steps: int, seed: int = 1, b: int = B, t: int = T, vocab: int = V):
    """(steps, b, t) inputs and targets from a random sparse Markov chain (learnable quickly)."""
    g = torch.Generator().manual_seed(seed)
    nxt = torch.randint(0, vocab, (vocab, 3), generator=g)
    seq = torch.empty(steps * b, t + 1, dtype=torch.long)
    seq[:, 0] = torch.randint(0, vocab, (steps * b,), generator=g)
    for i in range(t):
        pick = torch.randint(0, 3, (steps * b,), generator=g)
        seq[:, i + 1] = nxt[seq[:, i], pick]
    seq = seq.view(steps, b, t + 1)
    return seq[..., :-1].contiguous(), seq[..., 1:].contiguous()


def normlab_lr(s: int, lr: float, warmup: int, steps: int, min_ratio: float = 0.1,
               schedule: str = "cosine") -> float:
    """normlab's learning rate of 0-based step s (src/train/schedule.cpp)."""
    if s < warmup:
        return lr * (s + 1) / warmup
    lo = lr * min_ratio
    prog = min(1.0, max(0.0, (s - warmup) / max(1, steps - warmup)))
    if schedule == "cosine":
        return lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * prog))
    return lr - (lr - lo) * prog if schedule == "linear" else lr


def adamw_like_normlab(model: nn.Module, lr: float, weight_decay: float, betas=(0.9, 0.95),
                       eps: float = 1e-8) -> torch.optim.AdamW:
    """torch AdamW with normlab's decay rule: matrices (embeddings included) decayed, vectors
    (norm gains, biases) not."""
    params = [p for p in model.parameters() if p.requires_grad]
    seen, dec, nodec = set(), [], []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            (dec if p.dim() >= 2 else nodec).append(p)
    return torch.optim.AdamW([{"params": dec, "weight_decay": weight_decay},
                              {"params": nodec, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps)
