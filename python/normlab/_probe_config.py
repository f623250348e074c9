"""config.toml of a probed run: normlab config keys for what normlab.torch.Probe could tell of the
model, the optimizer and the loop (measured: micro-batches per optimizer step, batch shape, the
learning rates used; read: the model's config, the optimizer's hyperparameters, a scheduler's
kind), the user's ``config=`` on top, and every key it could not infer listed in
``source.unknown`` (contract with doctor: no check or remedy rests on an unknown key's value)."""
from __future__ import annotations

import math
from typing import Any

from ._config import Config

# PyTorch optimizer classes (torch.optim, torch-optimi, adam-atan2-pytorch) -> normlab's optim.name
OPTIMIZER_NAMES = {"AdamW": "adamw", "Muon": "muon", "StableAdamW": "stable_adamw",
                   "AdamAtan2": "adam_atan2"}
# torch.optim.lr_scheduler classes whose shape normlab's optim.schedule names
SCHEDULER_NAMES = {"CosineAnnealingLR": "cosine", "LinearLR": "linear", "ConstantLR": "constant"}
# Keys a PyTorch loop may set that the probe cannot observe (unless config= or a trainer says).
NOT_OBSERVABLE = ("optim.grad_clip",)


def _has_key(key: str) -> bool:
    """Whether this build's normlab knows the key (source.* arrives with doctor's [source])."""
    return key in Config.keys()


def inferred(p: Any) -> tuple[dict[str, Any], list[str]]:
    """(normlab config keys for what the probe can tell, the keys it could not infer)."""
    r, spec, model = p.r, p.r.spec, p.inner
    cfg = getattr(model, "config", None)
    unknown: list[str] = []
    c: dict[str, Any] = {
        "model.n_layer": len(r.blocks), "model.d_model": r.d_model, "model.n_head": r.n_head,
        "model.placement": spec.placement, "model.norm": spec.norm,
        "model.mlp": spec.mlp if spec.mlp in ("gelu", "gelu_tanh", "swiglu", "geglu") else "gelu",
        "model.qk_norm": spec.qk_norm, "model.qk_norm_scope": spec.qk_norm_scope,
        "model.attn_softcap": r.attn_softcap, "model.final_softcap": r.final_softcap,
        "model.pos": "rope" if spec.rope else "learned",
        "diag.interval": p.interval, "diag.per_head": p.per_head,
        "train.log_interval": 1, "train.spike_policy": "off", "train.eval_interval": 0,
        "train.steps": max(1, p.step_count), "optim.grad_clip": 0.0,
        # The data is the user's: a path normlab cannot read, so that doctor lists the
        # unigram plateau as unchecked (config={"data.path": ...} names readable data).
        "data.path": str(p.out / "(data of the PyTorch run: not recorded)")}
    unknown += list(NOT_OBSERVABLE)
    if r.vocab_size:
        c["model.vocab_size"] = r.vocab_size
    if r.n_kv_head != r.n_head:
        c["model.n_kv_head"] = r.n_kv_head
    if r.head_dim * r.n_head != r.d_model:
        c["model.head_dim"] = r.head_dim
    if r.head_dim and abs(r.scales[0] - r.head_dim ** -0.5) > 1e-12 * r.scales[0]:
        c["model.attn_scale"] = r.scales[0]
    d_ff = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
    if d_ff is None:
        lin = getattr(r.blocks[0].module, "linear1", None)
        d_ff = lin.out_features if lin is not None else 4 * r.d_model
    c["model.d_ff"] = int(d_ff)
    if r.head is not None and getattr(r.head, "weight", None) is not None:
        emb = [m for n, m in model.named_modules() if n in spec.embed]
        c["model.tie_embeddings"] = any(getattr(e, "weight", None) is r.head.weight for e in emb)
    if any(r.windows):
        c["model.sliding_window"] = max(r.windows)
        c["model.layer_pattern"] = ",".join("sliding" if w else "global" for w in r.windows)
    if r.family.startswith("gemma"):  # (1 + w) norm gains, embeddings times sqrt(d_model)
        c["model.norm_gain_offset"], c["model.embed_scale"] = 1.0, math.sqrt(r.d_model)
    eps = getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "layer_norm_epsilon", None)
    if eps:
        c["model.norm_eps"] = float(eps)
    c["model.bias"] = any(n.endswith(".bias") and g != "norm" for n, _, _, _, g in r.params)
    c["model.norm_bias"] = any(n.endswith(".bias") and g == "norm" for n, _, _, _, g in r.params)
    if spec.rope and getattr(cfg, "rope_theta", None):
        c["model.rope_theta"] = float(cfg.rope_theta)
    if p.bt[0]:
        # per process, as normlab's train.batch_size (source.world_size says how many)
        c["train.batch_size"] = int(p.bt[0])
        c["model.seq_len"] = int(p.bt[1])
    elif getattr(cfg, "max_position_embeddings", None):
        c["model.seq_len"] = int(cfg.max_position_embeddings)
    if p.micro_batches:  # forwards per optimizer step, counted
        c["train.grad_accum"] = max(p.micro_batches)
    else:
        unknown.append("train.grad_accum")
    opt = p.optimizer
    if opt is not None:
        kind = OPTIMIZER_NAMES.get(type(opt).__name__)
        if kind:
            c["optim.name"] = kind
        else:
            unknown.append("optim.name")
        g = opt.param_groups[0]
        if "betas" in g:
            c["optim.beta1"], c["optim.beta2"] = float(g["betas"][0]), float(g["betas"][1])
        if "eps" in g:
            c["optim.eps"] = float(g["eps"])
        c["optim.weight_decay"] = max(float(x.get("weight_decay", 0.0)) for x in opt.param_groups)
        if float(g["lr"]) > 0:
            c["optim.lr"] = float(g["lr"])
    else:
        unknown += ["optim.name", "optim.weight_decay"]
    lrs = p.lrs
    if lrs and max(lrs) > 0:
        peak = max(lrs)
        c["optim.lr"] = peak
        c["optim.warmup_steps"] = lrs.index(peak) + 1 if lrs[0] < peak else 0
        if min(lrs) == peak:  # every step used the same rate: constant, observed
            c["optim.schedule"] = "constant"
        elif p.scheduler_kind is not None:  # the shape, as the scheduler names it
            c["optim.schedule"] = p.scheduler_kind
        else:
            c["optim.schedule"] = "cosine"
            unknown.append("optim.schedule")
    else:
        unknown += ["optim.lr", "optim.schedule", "optim.warmup_steps"]
    return c, unknown


def config_text(p: Any) -> str:
    """config.toml's text: the inferred keys, the user's over them, [source] when known."""
    keys, unknown = inferred(p)
    user = p.user_cfg
    unknown = sorted(set(u for u in unknown + p.extra_unknown if u not in user))
    src = {"source.kind": "torch", "source.trainer": p.trainer, "source.unknown": unknown,
           "source.world_size": p.world_size, "source.sharding": p.sharding}
    if _has_key("source.kind"):
        keys.update(src)
    keys.update(user)
    text = Config(keys).to_toml()
    head = (f"# Written by normlab.torch.Probe for a PyTorch {type(p.inner).__name__} "
            f"({p.r.family} map): the model and optimizer as far as the probe could tell.\n")
    if not _has_key("source.kind") and unknown:
        head += f"# not inferred (normlab defaults written): {', '.join(unknown)}\n"
    return head + "".join(f"# note: {n}\n" for n in p.notes) + text
