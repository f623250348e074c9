"""Tiny PyTorch models and training loops for the normlab.torch.Probe tests: Hugging Face models
built from configs with random weights (nothing is downloaded), a nanoGPT-style GPT, a model
around nn.TransformerEncoder, batches from a fixed random Markov chain, and normlab's learning-rate
schedule (src/train/schedule.cpp) for loops that must match normlab's trainer. Also the runs made
unstable on purpose that doctor must diagnose (UNSTABLE; test_probe_doctor.py,
test_probe_doctor_paths.py): byte-level models on the corpus normlab embeds."""
from __future__ import annotations

import math
from pathlib import Path

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


CORPUS = Path(__file__).resolve().parents[2] / "data" / "wordnet_glosses.txt"

# condition -> (normlab --set overrides, the PyTorch model, the kind doctor must name or None)
UNSTABLE = {
    # Pre-Norm without QK-Norm at a high learning rate: attention logits grow.
    "attention": ({"train.steps": 30, "optim.lr": 0.3, "optim.warmup_steps": 10,
                   "diag.interval": 5}, "pre", "attention_logit_growth"),
    # weight decay 0, no z-loss, lr 1: log Z drifts away.
    "output_logits": ({"train.steps": 300, "optim.lr": 1.0, "optim.warmup_steps": 10,
                       "optim.weight_decay": 0.0, "diag.interval": 10}, "pre",
                      "output_logit_divergence"),
    # 12 Post-Norm layers, no warmup: the loss spikes.
    "post_deep": ({"train.steps": 150, "optim.lr": 0.1, "optim.warmup_steps": 0,
                   "model.n_layer": 12, "model.placement": "post", "diag.interval": 10},
                  "post", "loss_spikes"),
    # Peri-Norm with QK-Norm (Gemma 3's layout) at a moderate learning rate: healthy.
    "healthy": ({"train.steps": 150, "optim.lr": 0.1, "optim.warmup_steps": 10,
                 "model.placement": "peri", "model.qk_norm": "rmsnorm", "diag.interval": 10},
                "peri_qk", None),
}


def corpus_batches(steps: int, b: int, t: int, seed: int):
    """Random windows of the corpus's training split (the first 95%, as data.val_fraction)."""
    data = torch.frombuffer(bytearray(CORPUS.read_bytes()), dtype=torch.uint8).long()
    n = int(len(data) * 0.95)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        off = torch.randint(0, n - t - 1, (b,), generator=g)
        w = torch.stack([data[o:o + t + 1] for o in off.tolist()])
        yield w[:, :-1], w[:, 1:]


def unstable_model(kind: str, n_layer: int) -> nn.Module:
    """The PyTorch model of an UNSTABLE case: "pre" (nanoGPT-style), "post" (nn.TransformerEncoder,
    Post-Norm), "peri_qk" (Gemma 3)."""
    torch.manual_seed(0)
    if kind == "pre":
        return GPT(n_layer=n_layer, C=32, H=2, vocab=256, seq=32)
    if kind == "post":
        return EncoderLM(norm_first=False, n_layer=n_layer, C=32, H=2, vocab=256)
    return hf_model("gemma3", vocab_size=256, hidden_size=32, intermediate_size=64,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                    max_position_embeddings=32, sliding_window=32, query_pre_attn_scalar=16,
                    final_logit_softcapping=None)


def unstable_run(case: str, out, mode: str = "eager", rank: int = 0, world: int = 1,
                 steps: int | None = None) -> None:
    """The probed PyTorch run of UNSTABLE[case] into `out`: global batches of 4 windows of 32
    bytes, normlab's schedule, AdamW, clipping at 1.0. mode "eager"; "compile" (the probe attached,
    then the model compiled with the aot_eager backend); "ddp" (this process is `rank` of `world`
    under DistributedDataParallel, taking its rows of each global batch). `steps` shortens the run
    (the schedule keeps the case's length)."""
    import normlab.torch as ntorch
    sets, kind, _ = UNSTABLE[case]
    total, lr, warm = sets["train.steps"], sets["optim.lr"], sets["optim.warmup_steps"]
    model = unstable_model(kind, sets.get("model.n_layer", 2))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                            weight_decay=sets.get("optim.weight_decay", 0.1))
    target = torch.nn.parallel.DistributedDataParallel(model) if mode == "ddp" else model
    cfg = {"data.path": str(CORPUS), "data.tokenizer": "bytes", "optim.grad_clip": 1.0}
    b = 4 // world
    rows = slice(rank * b, (rank + 1) * b)
    with ntorch.Probe(target, opt, out=out, interval=sets["diag.interval"], per_head=True,
                      config=cfg) as probe:
        call = torch.compile(model, backend="aot_eager") if mode == "compile" else target
        for s, (x, y) in enumerate(corpus_batches(steps or total, 4, 32, seed=7)):
            x, y = x[rows], y[rows]
            for g in opt.param_groups:
                g["lr"] = normlab_lr(s, lr, warm, total)
            if isinstance(model, (GPT, EncoderLM)):
                loss = call(x, y)[1]
            else:
                logits = call(input_ids=x).logits
                loss = F.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            probe.step(loss, grad_norm=norm)


class _HFStyle:
    """forward(input_ids, labels) -> {"loss", "logits"}: the calling convention of
    transformers.Trainer, mixed into GPT and EncoderLM (the probe still knows them by their base
    class)."""

    def forward(self, input_ids, labels=None):
        logits, loss = super().forward(input_ids, labels)
        return {"loss": loss, "logits": logits}


class TrainerGPT(_HFStyle, GPT):
    pass


class TrainerEncoderLM(_HFStyle, EncoderLM):
    pass


def unstable_trainer_run(case: str, out, steps: int | None = None):
    """UNSTABLE[case] through transformers.Trainer with normlab.torch.TrainerCallback: the same
    model (in Trainer's calling convention, the same initial weights), the same batches in the
    same order (sequential sampling), the same AdamW and schedule (Trainer's `optimizers=`), clipped
    by Trainer at 1.0. Returns the Trainer."""
    import normlab.torch as ntorch
    sets, kind, _ = UNSTABLE[case]
    total, lr, warm = sets["train.steps"], sets["optim.lr"], sets["optim.warmup_steps"]
    steps = steps or total
    if kind not in ("pre", "post"):
        raise ValueError(f"unstable_trainer_run: no Trainer form of the {kind!r} model")
    src = unstable_model(kind, sets.get("model.n_layer", 2))
    model = (TrainerGPT(n_layer=len(src.transformer.h), C=32, H=2, vocab=256, seq=32)
             if kind == "pre" else
             TrainerEncoderLM(norm_first=False, n_layer=len(src.encoder.layers), C=32, H=2,
                              vocab=256))
    model.load_state_dict(src.state_dict())
    wd = sets.get("optim.weight_decay", 0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=wd)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: normlab_lr(s, lr, warm, total) / lr)
    data = [{"input_ids": x[i], "labels": y[i]}
            for x, y in corpus_batches(steps, 4, 32, seed=7) for i in range(4)]
    args = transformers.TrainingArguments(
        str(out) + "-hf", max_steps=steps, per_device_train_batch_size=4, learning_rate=lr,
        warmup_steps=warm, weight_decay=wd, adam_beta2=0.95, max_grad_norm=1.0,
        lr_scheduler_type="cosine", logging_steps=1, train_sampling_strategy="sequential",
        report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True)
    cb = ntorch.TrainerCallback(out=out, interval=sets["diag.interval"], per_head=True,
                                config={"data.path": str(CORPUS), "data.tokenizer": "bytes"})
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data,
                                   optimizers=(opt, sched), callbacks=[cb])
    trainer.train()
    return trainer
