"""The PyTorch oracle's configuration: normlab's defaults and allowed choices, the effective
attention options (head size, key/value heads, sliding layers, RoPE frequencies) and the TOML
writer, all written from tests/reference/README.md and include/normlab/config.h.

A configuration is a dict of sections with the TOML keys, {"model": {...}, "optim": {...},
"train": {...}}; `make_config` fills in normlab's defaults (include/normlab/config.h).

    cfg = make_config(model={"placement": "peri", "n_layer": 2, ...})
    text = to_toml(cfg)                                    # what normlab's drivers read
"""
from __future__ import annotations

import copy
import math

import torch

DEFAULTS = {
    "model": {
        "vocab_size": 256,
        "n_layer": 4,
        "d_model": 128,
        "n_head": 4,
        "n_kv_head": 0,
        "head_dim": 0,
        "d_ff": 512,
        "seq_len": 128,
        "placement": "pre",
        "mix_ratio": 0.25,
        "norm": "layernorm",
        "norm_eps": 1e-5,
        "norm_bias": False,
        "norm_gain_offset": 0.0,
        "dyt_alpha_attn": 0.8,
        "dyt_alpha_mlp": 0.2,
        "dyt_alpha_final": 0.2,
        "dyt_alpha_qk": 0.5,
        "residual_scale": "none",
        "layerscale_init": 0.1,
        "skipinit_init": 0.0,
        "attn_gate": "none",
        "attn_sink": "none",
        "ngpt_alpha_init": 0.05,
        "qk_norm": "none",
        "qk_norm_scope": "head",
        "qk_norm_position": "pre_rope",
        "pos": "rope",
        "rope_theta": 10000.0,
        "rope_scaling": "none",
        "rope_factor": 1.0,
        "rope_low_freq_factor": 1.0,
        "rope_high_freq_factor": 4.0,
        "rope_original_seq_len": 8192,
        "sliding_window": 0,
        "layer_pattern": "global",
        "rope_local_theta": 0.0,
        "mlp": "gelu",
        "bias": False,
        "attn_qkv_bias": False,
        "attn_out_bias": False,
        "mlp_bias": False,
        "tie_embeddings": True,
        "attn_softcap": 0.0,
        "final_softcap": 0.0,
        "attn_scale": 0.0,
        "embed_scale": 1.0,
        "init": "gpt2",
        "init_std": 0.02,
        "admin_omega": "profile",
        "hybrid_first_pre": False,
    },
    "optim": {
        "lr": 1e-3,
        "min_lr_ratio": 0.1,
        "beta1": 0.9,
        "beta2": 0.95,
        "eps": 1e-8,
        "weight_decay": 0.1,
        "decay_embeddings": True,
        "grad_clip": 1.0,
        "warmup_steps": 100,
        "schedule": "cosine",
    },
    "train": {
        "seed": 1337,
        "z_loss": 0.0,
        "steps": 1000,
        "batch_size": 8,
    },
}

CHOICES = {
    "placement": ("post", "pre", "peri", "reordered", "deepnorm", "mix", "ngpt", "hybrid"),
    "norm": ("layernorm", "rmsnorm", "dyt", "derf"),
    "residual_scale": ("none", "rezero", "skipinit", "layerscale"),
    "attn_gate": ("none", "head", "elementwise"),
    "attn_sink": ("none", "one", "learned"),
    "qk_norm": ("none", "rmsnorm", "layernorm", "dyt", "derf"),
    "qk_norm_scope": ("head", "full"),
    "qk_norm_position": ("pre_rope", "post_rope"),
    "pos": ("rope", "learned"),
    "rope_scaling": ("none", "linear", "llama3"),
    "mlp": ("gelu", "gelu_tanh", "swiglu", "geglu"),
    "init": ("gpt2", "normal", "xavier", "admin"),
    "admin_omega": ("profile", "logn"),
    "schedule": ("cosine", "linear", "constant"),
}


def make_config(model=None, optim=None, train=None):
    """normlab's defaults overridden section by section; unknown keys and bad choices are errors."""
    cfg = copy.deepcopy(DEFAULTS)
    for section, over in (("model", model), ("optim", optim), ("train", train)):
        for key, value in (over or {}).items():
            if key not in cfg[section]:
                raise KeyError(f"[ref_model] unknown key {section}.{key}")
            default = DEFAULTS[section][key]
            if isinstance(default, bool):
                value = bool(value)
            elif isinstance(default, float):
                value = float(value)
            elif isinstance(default, int):
                value = int(value)
            if key in CHOICES and value not in CHOICES[key]:
                raise ValueError(f"[ref_model] {section}.{key} = {value!r}: not in {CHOICES[key]}")
            cfg[section][key] = value
    m = cfg["model"]
    if m["head_dim"] == 0 and m["d_model"] % m["n_head"]:
        raise ValueError("[ref_model] d_model / n_head must be an integer (or set head_dim)")
    if m["pos"] == "rope" and head_size(m) % 2:
        raise ValueError("[ref_model] the head size must be even for RoPE")
    if m["n_head"] % kv_heads(m):
        raise ValueError("[ref_model] n_head must be a multiple of n_kv_head")
    sliding = layer_types(m)  # raises on a bad pattern
    if any(sliding) != (m["sliding_window"] > 0):
        raise ValueError("[ref_model] sliding layers need sliding_window > 0, and only they")
    if m["rope_local_theta"] > 0 and not any(sliding):
        raise ValueError("[ref_model] rope_local_theta needs a sliding layer")
    return cfg


# Effective values of the attention options (README: "Dimensions").
def head_size(m):
    """D: head_dim, or d_model / n_head when head_dim = 0."""
    return m["head_dim"] if m["head_dim"] > 0 else m["d_model"] // m["n_head"]


def kv_heads(m):
    """Hkv: n_kv_head, or n_head when n_kv_head = 0."""
    return m["n_kv_head"] if m["n_kv_head"] > 0 else m["n_head"]


def layer_types(m):
    """[True if layer l is a sliding-window layer] from layer_pattern: "global", "sliding",
    "every:K" (layers K-1, 2K-1, ... global, the others sliding), or a comma list."""
    L, pat = m["n_layer"], m["layer_pattern"]
    if pat in ("global", "sliding"):
        return [pat == "sliding"] * L
    if pat.startswith("every:"):
        k = int(pat[len("every:"):])
        if k < 1:
            raise ValueError(f"[ref_model] layer_pattern {pat!r}: K must be >= 1")
        return [(l + 1) % k != 0 for l in range(L)]
    words = [w.strip() for w in pat.split(",")]
    if len(words) != L or any(w not in ("global", "sliding") for w in words):
        raise ValueError(f"[ref_model] layer_pattern {pat!r} is not {L} global/sliding words")
    return [w == "sliding" for w in words]


def rope_inv_freq(m, layer_sliding):
    """RoPE inverse frequencies (D/2,) in float64 of a layer. Sliding layers with
    rope_local_theta > 0: rope_local_theta^(-2i/D), unscaled. Every other layer: base rope_theta,
    then rope_scaling:
      linear: every frequency / factor (position interpolation);
      llama3 (Llama 3.1): wavelength w = 2 pi / f; w < original / high_freq_factor keeps f;
        w > original / low_freq_factor gives f / factor; in between
        f * ((1 - s) / factor + s), s = (original / w - low_freq_factor) /
        (high_freq_factor - low_freq_factor)."""
    D = head_size(m)
    local = layer_sliding and m["rope_local_theta"] > 0
    base = m["rope_local_theta"] if local else m["rope_theta"]
    i = torch.arange(D // 2, dtype=torch.float64)
    freq = base ** (-2.0 * i / D)
    kind = "none" if local else m["rope_scaling"]
    if kind == "linear":
        return freq / m["rope_factor"]
    if kind == "llama3":
        factor, lo, hi = m["rope_factor"], m["rope_low_freq_factor"], m["rope_high_freq_factor"]
        orig = m["rope_original_seq_len"]
        out = []
        for f in freq.tolist():
            w = 2.0 * math.pi / f
            if w < orig / hi:
                out.append(f)
            elif w > orig / lo:
                out.append(f / factor)
            else:
                s = (orig / w - lo) / (hi - lo)
                out.append(f * ((1.0 - s) / factor + s))
        return torch.tensor(out, dtype=torch.float64)
    return freq


def _toml_value(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"[ref_model] cannot write {value} to TOML")
        return repr(value)  # shortest round-trip repr: '0.01', '1e-05', '4.0' are valid TOML floats
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"[ref_model] no TOML form for {value!r}")


def to_toml(cfg):
    """The config as TOML text with sections [model], [optim], [train] (floats always as floats)."""
    lines = []
    for section in ("model", "optim", "train"):
        lines.append(f"[{section}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in cfg[section].items()]
        lines.append("")
    return "\n".join(lines)
