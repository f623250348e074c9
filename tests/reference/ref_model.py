"""The PyTorch oracle: normlab's model, loss and optimiser written from README.md's formulas.

Independent of normlab's C++ by construction: everything here follows tests/reference/README.md
(the block plan table, the norm / RoPE / attention / MLP / loss formulas, AdamW with PyTorch
semantics, the learning-rate schedule). It runs in float64 by default so that, against normlab's
float32, the oracle's own round-off is negligible.

A configuration is a dict of sections with the TOML keys, {"model": {...}, "optim": {...},
"train": {...}}; `make_config` fills in normlab's defaults (include/normlab/config.h).

    cfg = make_config(model={"placement": "peri", "n_layer": 2, ...})
    model = RefModel(cfg)
    params = model.random_params(seed=0)                   # {normlab name: tensor}
    logits, loss, ce, zl = model.forward(params, idx, targets)
    out = model.loss_and_grads(params, idx, targets)       # adds {"grad.<name>": ...}
    run = adamw_run(model, params, idx, targets, n_steps=3)
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

# ----------------------------------------------------------------------------------------------
# Configuration

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
    "placement": ("post", "pre", "peri", "reordered", "deepnorm", "mix"),
    "norm": ("layernorm", "rmsnorm"),
    "qk_norm": ("none", "rmsnorm", "layernorm"),
    "qk_norm_scope": ("head", "full"),
    "qk_norm_position": ("pre_rope", "post_rope"),
    "pos": ("rope", "learned"),
    "rope_scaling": ("none", "linear", "llama3"),
    "mlp": ("gelu", "gelu_tanh", "swiglu", "geglu"),
    "init": ("gpt2", "normal", "xavier"),
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


# ----------------------------------------------------------------------------------------------
# Block plan (README: "Forward", the placement table)


@dataclass(frozen=True)
class SublayerPlan:
    norm_in: bool
    norm_out: bool
    alpha: float
    norm_after_add: bool


def _plan_for(placement, n_layer):
    if placement == "post":
        return SublayerPlan(False, False, 1.0, True)
    if placement == "pre":
        return SublayerPlan(True, False, 1.0, False)
    if placement == "peri":
        return SublayerPlan(True, True, 1.0, False)
    if placement == "reordered":
        return SublayerPlan(False, True, 1.0, False)
    if placement == "deepnorm":
        return SublayerPlan(False, False, (2.0 * n_layer) ** 0.25, True)
    raise ValueError(f"[ref_model] no plan for placement {placement!r}")


def block_plans(model_cfg):
    """One SublayerPlan per block (the attention and MLP sublayers of a block share it)."""
    L = model_cfg["n_layer"]
    placement = model_cfg["placement"]
    if placement == "mix":
        n_post = math.ceil(model_cfg["mix_ratio"] * L)
        return [_plan_for("post" if l < n_post else "pre", L) for l in range(L)]
    return [_plan_for(placement, L) for _ in range(L)]


# ----------------------------------------------------------------------------------------------
# Parameter table


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple
    kind: str  # "embedding", "linear" (a matrix), "gain", "bias"


class RefModel:
    def __init__(self, cfg, dtype=torch.float64):
        self.cfg = cfg
        self.m = cfg["model"]
        self.dtype = dtype
        m = self.m
        self.L, self.C, self.H, self.F, self.V = (
            m["n_layer"], m["d_model"], m["n_head"], m["d_ff"], m["vocab_size"])
        self.D = head_size(m)          # head size
        self.Hkv = kv_heads(m)         # key/value heads; query head h reads kv head h // (H / Hkv)
        self.Cq = self.H * self.D      # width of q and of the attention output
        self.Ckv = self.Hkv * self.D   # width of k and of v
        self.sliding = layer_types(m)
        self.plans = block_plans(m)
        # The final norm exists iff the last sublayer of the last block has no norm_after_add.
        self.has_final_norm = not self.plans[-1].norm_after_add
        self.specs = self._param_specs()

    # -- parameters ---------------------------------------------------------------------------
    def _norm_specs(self, prefix, kind, width, specs):
        specs.append(ParamSpec(f"{prefix}.weight", (width,), "gain"))
        if kind == "layernorm" and self.m["norm_bias"]:
            specs.append(ParamSpec(f"{prefix}.bias", (width,), "bias"))

    def _linear_specs(self, prefix, n_out, n_in, specs, bias):
        specs.append(ParamSpec(f"{prefix}.weight", (n_out, n_in), "linear"))
        if bias:
            specs.append(ParamSpec(f"{prefix}.bias", (n_out,), "bias"))

    def _param_specs(self):
        m, C, D, F_, V = self.m, self.C, self.D, self.F, self.V
        Cq, Ckv = self.Cq, self.Ckv
        qkv_bias = m["bias"] or m["attn_qkv_bias"]
        out_bias = m["bias"] or m["attn_out_bias"]
        mlp_bias = m["bias"] or m["mlp_bias"]
        specs = [ParamSpec("tok_emb.weight", (V, C), "embedding")]
        if m["pos"] == "learned":
            specs.append(ParamSpec("pos_emb.weight", (m["seq_len"], C), "embedding"))
        for l, plan in enumerate(self.plans):
            for sub in ("attn", "mlp"):
                p = f"blocks.{l}.{sub}"
                if plan.norm_in:
                    self._norm_specs(f"{p}.norm_in", m["norm"], C, specs)
                if sub == "attn":
                    self._linear_specs(f"{p}.wqkv", Cq + 2 * Ckv, C, specs, qkv_bias)
                    if m["qk_norm"] != "none":
                        head = m["qk_norm_scope"] == "head"
                        self._norm_specs(f"{p}.q_norm", m["qk_norm"], D if head else Cq, specs)
                        self._norm_specs(f"{p}.k_norm", m["qk_norm"], D if head else Ckv, specs)
                    self._linear_specs(f"{p}.wo", C, Cq, specs, out_bias)
                else:
                    gated = m["mlp"] in ("swiglu", "geglu")
                    self._linear_specs(f"{p}.w_in", 2 * F_ if gated else F_, C, specs, mlp_bias)
                    self._linear_specs(f"{p}.w_out", C, F_, specs, mlp_bias)
                if plan.norm_out:
                    self._norm_specs(f"{p}.norm_out", m["norm"], C, specs)
                if plan.norm_after_add:
                    self._norm_specs(f"{p}.norm_post", m["norm"], C, specs)
        if self.has_final_norm:
            self._norm_specs("final_norm", m["norm"], C, specs)
        if not m["tie_embeddings"]:
            specs.append(ParamSpec("lm_head.weight", (V, C), "linear"))
        names = [s.name for s in specs]
        assert len(names) == len(set(names)), "a parameter name is registered twice"
        return specs

    def param_names(self):
        return [s.name for s in self.specs]

    def block_param_names(self, layer=0):
        return [s.name for s in self.specs if s.name.startswith(f"blocks.{layer}.")]

    def decayed(self, name):
        """README: decay linear weights and lm_head; embeddings iff decay_embeddings (a tied
        tok_emb.weight is an embedding); never norm gains or biases."""
        kind = {s.name: s.kind for s in self.specs}[name]
        if kind == "linear":
            return True
        if kind == "embedding":
            return self.cfg["optim"]["decay_embeddings"]
        return False

    def random_params(self, seed, dtype=torch.float32):
        """Random, non-trivial values for every parameter: effective norm gains g0 + w spread over
        [0.5, 1.5], biases ~ N(0, 0.2^2), linear weights ~ N(0, 1/fan_in) (q/k rows a bit larger
        so that soft-caps saturate), embeddings ~ N(0, 0.5^2). Rounded to float32 so that the
        oracle and normlab start from the same numbers."""
        gen = torch.Generator().manual_seed(seed)
        g0 = self.m["norm_gain_offset"]
        params = {}
        for s in self.specs:
            if s.kind == "gain":
                t = torch.rand(s.shape, generator=gen, dtype=torch.float64) + 0.5 - g0
            elif s.kind == "bias":
                t = 0.2 * torch.randn(s.shape, generator=gen, dtype=torch.float64)
            elif s.kind == "embedding":
                t = 0.5 * torch.randn(s.shape, generator=gen, dtype=torch.float64)
            else:
                t = torch.randn(s.shape, generator=gen, dtype=torch.float64) / math.sqrt(s.shape[1])
                if s.name.endswith("attn.wqkv.weight"):
                    t[: self.Cq + self.Ckv] *= 1.5  # query and key rows
            params[s.name] = t.to(torch.float32).to(dtype)
        return params

    # -- forward pieces -----------------------------------------------------------------------
    def norm(self, x, params, prefix, kind=None):
        """LayerNorm: (x - mean) / sqrt(var + eps) * (g0 + w) + b (biased var);
        RMSNorm: x / sqrt(mean(x^2) + eps) * (g0 + w). Over the last dimension."""
        kind = kind or self.m["norm"]
        eps, g0 = self.m["norm_eps"], self.m["norm_gain_offset"]
        if kind == "layernorm":
            mean = x.mean(-1, keepdim=True)
            var = ((x - mean) ** 2).mean(-1, keepdim=True)
            y = (x - mean) / torch.sqrt(var + eps)
        else:
            y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        y = y * (g0 + params[f"{prefix}.weight"])
        bias = params.get(f"{prefix}.bias")
        return y if bias is None else y + bias

    def rope(self, x, layer=None):
        """Rotate-half RoPE on (B, H, T, D): for i < D/2, a = t * freq_i (rope_inv_freq of the
        layer; theta^(-2i/D) unscaled), out[i] = x1 cos a - x2 sin a,
        out[i + D/2] = x2 cos a + x1 sin a. layer None: a global layer."""
        T, D = x.shape[-2], x.shape[-1]
        assert D == self.D
        sliding = layer is not None and self.sliding[layer]
        freq = rope_inv_freq(self.m, sliding)  # (D/2)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * freq[None, :]  # (T, D/2)
        cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    @staticmethod
    def _linear(x, params, prefix):
        y = x @ params[f"{prefix}.weight"].T
        bias = params.get(f"{prefix}.bias")
        return y if bias is None else y + bias

    def attention(self, u, params, prefix, layer=None):
        """layer: the block index (RoPE base and scaling, sliding window); None reads it from
        a prefix "blocks.{l}.attn", else the layer is global."""
        m, H, Hkv, D, Cq, Ckv = self.m, self.H, self.Hkv, self.D, self.Cq, self.Ckv
        if layer is None and prefix.startswith("blocks."):
            layer = int(prefix.split(".")[1])
        sliding = layer is not None and self.sliding[layer]
        B, T, _ = u.shape
        qkv = self._linear(u, params, f"{prefix}.wqkv")  # (B, T, Cq + 2 Ckv)
        q, k, v = qkv[..., :Cq], qkv[..., Cq : Cq + Ckv], qkv[..., Cq + Ckv :]
        qk_kind, scope, position = m["qk_norm"], m["qk_norm_scope"], m["qk_norm_position"]
        use_rope = m["pos"] == "rope"

        def heads(t):  # (B, T, n * D) -> (B, n, T, D)
            return t.reshape(B, T, -1, D).transpose(1, 2)

        def merge(t):  # (B, n, T, D) -> (B, T, n * D)
            return t.transpose(1, 2).reshape(B, T, -1)

        def qk_norm(t, which):  # t: (B, n, T, D)
            if scope == "full":
                return heads(self.norm(merge(t), params, f"{prefix}.{which}_norm", qk_kind))
            return self.norm(t, params, f"{prefix}.{which}_norm", qk_kind)

        q, k, v = heads(q), heads(k), heads(v)  # (B, H, T, D), (B, Hkv, T, D) twice
        if qk_kind != "none" and position == "pre_rope":
            q, k = qk_norm(q, "q"), qk_norm(k, "k")
        if use_rope:
            q, k = self.rope(q, layer), self.rope(k, layer)
        if qk_kind != "none" and position == "post_rope":
            q, k = qk_norm(q, "q"), qk_norm(k, "k")
        # Grouped-query attention: query head h reads key/value head h // (H / Hkv).
        group = H // Hkv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)

        scale = m["attn_scale"] if m["attn_scale"] != 0 else 1.0 / math.sqrt(D)
        s = scale * (q @ k.transpose(-1, -2))  # (B, H, T, T)
        cap = m["attn_softcap"]
        if cap > 0:
            s = cap * torch.tanh(s / cap)
        i = torch.arange(T)[:, None]
        j = torch.arange(T)[None, :]
        hidden = j > i  # causal: key j after query i
        if sliding:  # a sliding layer's query i sees keys i - W < j <= i
            hidden = hidden | (j <= i - m["sliding_window"])
        s = s.masked_fill(hidden, float("-inf"))
        p = torch.softmax(s, dim=-1)
        o = merge(p @ v)  # (B, T, Cq): head h in columns [hD, (h+1)D)
        return self._linear(o, params, f"{prefix}.wo")

    @staticmethod
    def gelu_tanh(h):
        return 0.5 * h * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (h + 0.044715 * h ** 3)))

    def mlp(self, u, params, prefix):
        kind, F_ = self.m["mlp"], self.F
        h = self._linear(u, params, f"{prefix}.w_in")
        if kind == "gelu":
            a = 0.5 * h * (1.0 + torch.erf(h / math.sqrt(2.0)))
        elif kind == "gelu_tanh":
            a = self.gelu_tanh(h)
        elif kind == "swiglu":
            gate, up = h[..., :F_], h[..., F_:]
            a = gate * torch.sigmoid(gate) * up
        else:  # geglu
            gate, up = h[..., :F_], h[..., F_:]
            a = self.gelu_tanh(gate) * up
        return self._linear(a, params, f"{prefix}.w_out")

    def sublayer(self, x, params, prefix, plan, branch):
        """u = N_in(x)?; f = F(u); g = N_out(f)?; s = alpha x + g; x' = N_post(s)?"""
        u = self.norm(x, params, f"{prefix}.norm_in") if plan.norm_in else x
        f = branch(u, params, prefix)
        g = self.norm(f, params, f"{prefix}.norm_out") if plan.norm_out else f
        s = plan.alpha * x + g
        return self.norm(s, params, f"{prefix}.norm_post") if plan.norm_after_add else s

    def block(self, x, params, layer):
        plan = self.plans[layer]
        x = self.sublayer(x, params, f"blocks.{layer}.attn", plan, self.attention)
        return self.sublayer(x, params, f"blocks.{layer}.mlp", plan, self.mlp)

    def forward(self, params, idx, targets):
        """-> (logits (B, T, V), loss, ce, zl) as 0-d tensors for the losses."""
        m = self.m
        T = idx.shape[1]
        x = params["tok_emb.weight"][idx] * m["embed_scale"]
        if m["pos"] == "learned":
            x = x + params["pos_emb.weight"][:T]
        for l in range(self.L):
            x = self.block(x, params, l)
        if self.has_final_norm:
            x = self.norm(x, params, "final_norm")
        w_head = params["tok_emb.weight"] if m["tie_embeddings"] else params["lm_head.weight"]
        logits = x @ w_head.T
        cap = m["final_softcap"]
        if cap > 0:
            logits = cap * torch.tanh(logits / cap)
        flat = logits.reshape(-1, self.V)
        lse = torch.logsumexp(flat, dim=-1)  # (N)
        ce = (lse - flat.gather(1, targets.reshape(-1, 1)).squeeze(1)).mean()
        zl = self.cfg["train"]["z_loss"] * (lse ** 2).mean()
        return logits, ce + zl, ce, zl

    # -- gradients ----------------------------------------------------------------------------
    def _leaves(self, params):
        return {k: v.detach().to(self.dtype).clone().requires_grad_(True) for k, v in params.items()}

    def loss_and_grads(self, params, idx, targets):
        """{"logits", "loss", "ce", "z_loss", "grad.<name>"} for every parameter (detached)."""
        leaves = self._leaves(params)
        missing = set(self.param_names()) - set(leaves)
        assert not missing, f"missing parameters {sorted(missing)}"
        logits, loss, ce, zl = self.forward(leaves, idx, targets)
        names = self.param_names()
        grads = torch.autograd.grad(loss, [leaves[n] for n in names], allow_unused=True)
        out = {"logits": logits.detach(), "loss": loss.detach().reshape(1),
               "ce": ce.detach().reshape(1), "z_loss": zl.detach().reshape(1)}
        for n, g in zip(names, grads):
            assert g is not None, f"parameter {n} is declared but the forward never uses it"
            out[f"grad.{n}"] = g
        return out

    def block_grads(self, params, x, dy, layer=0):
        """Block `layer` alone: {"y", "dx", "grad.<block param>"} with dx = d sum(y * dy) / dx."""
        leaves = self._leaves(params)
        x = x.detach().to(self.dtype).clone().requires_grad_(True)
        y = self.block(x, leaves, layer)
        names = self.block_param_names(layer)
        grads = torch.autograd.grad((y * dy.to(self.dtype)).sum(), [x] + [leaves[n] for n in names],
                                    allow_unused=True)
        out = {"y": y.detach(), "dx": grads[0]}
        for n, g in zip(names, grads[1:]):
            assert g is not None, f"parameter {n} is declared but the block never uses it"
            out[f"grad.{n}"] = g
        return out


# ----------------------------------------------------------------------------------------------
# Optimiser: global-norm clipping, AdamW (PyTorch semantics), learning-rate schedule


def learning_rate(optim_cfg, total_steps, s):
    """LR at 0-based step s: linear warmup, then cosine / linear decay to lr * min_lr_ratio."""
    lr = optim_cfg["lr"]
    lr_min = lr * optim_cfg["min_lr_ratio"]
    warmup = optim_cfg["warmup_steps"]
    if s < warmup:
        return lr * (s + 1) / warmup
    p = min(1.0, max(0.0, (s - warmup) / max(1, total_steps - warmup)))
    schedule = optim_cfg["schedule"]
    if schedule == "cosine":
        return lr_min + (lr - lr_min) * 0.5 * (1.0 + math.cos(math.pi * p))
    if schedule == "linear":
        return lr - (lr - lr_min) * p
    return lr


def clip_grads(grads, grad_clip):
    """g *= min(1, grad_clip / (||g||_2 + 1e-6)) over all parameters; returns the norm before."""
    norm = math.sqrt(sum(float((g.double() ** 2).sum()) for g in grads.values()))
    if grad_clip > 0:
        coef = min(1.0, grad_clip / (norm + 1e-6))
        for g in grads.values():
            g.mul_(coef)
    return norm


class AdamW:
    """Decoupled weight decay, then Adam with bias correction (torch.optim.AdamW's update)."""

    def __init__(self, params, decayed, beta1, beta2, eps, weight_decay):
        self.decayed = decayed  # {name: bool}
        self.b1, self.b2, self.eps, self.wd = beta1, beta2, eps, weight_decay
        self.m = {k: torch.zeros_like(v) for k, v in params.items()}
        self.v = {k: torch.zeros_like(v) for k, v in params.items()}
        self.t = 0

    def step(self, params, grads, lr):
        self.t += 1
        bc1, bc2 = 1.0 - self.b1 ** self.t, 1.0 - self.b2 ** self.t
        for name, p in params.items():
            g = grads[name]
            if self.decayed[name]:
                p.mul_(1.0 - lr * self.wd)  # p -= lr * wd * p
            self.m[name].mul_(self.b1).add_((1.0 - self.b1) * g)
            self.v[name].mul_(self.b2).add_((1.0 - self.b2) * g * g)
            m_hat = self.m[name] / bc1
            v_hat = self.v[name] / bc2
            p.sub_(lr * m_hat / (torch.sqrt(v_hat) + self.eps))


def make_adamw(model, params):
    o = model.cfg["optim"]
    return AdamW(params, {n: model.decayed(n) for n in params}, o["beta1"], o["beta2"], o["eps"],
                 o["weight_decay"])


def adamw_run(model, params, idx, targets, n_steps):
    """n_steps of (forward + backward on the same batch, clip, AdamW at the scheduled LR).
    Returns {"param_after.<name>", "loss_step.<k>"}; loss_step.k is step k's forward loss
    (before its update), so loss_step.0 equals the plain forward's loss."""
    o = model.cfg["optim"]
    total = model.cfg["train"]["steps"]
    p = {k: v.detach().to(model.dtype).clone() for k, v in params.items()}
    opt = make_adamw(model, p)
    out = {}
    for k in range(n_steps):
        res = model.loss_and_grads(p, idx, targets)
        out[f"loss_step.{k}"] = res["loss"]
        grads = {n: res[f"grad.{n}"].clone() for n in p}
        clip_grads(grads, o["grad_clip"])
        opt.step(p, grads, learning_rate(o, total, k))
    for n, v in p.items():
        out[f"param_after.{n}"] = v
    return out


def adamw_replay(model, params, step_grads, storage=torch.float32):
    """The optimizer alone: clip, schedule and AdamW (as adamw_run) applied to given gradients,
    step_grads[k] = {name: gradient of step k before clipping}, in float64, with the parameters
    rounded to `storage` after every step (as a float32 model keeps them). Returns
    {"param_after.<name>"}."""
    o = model.cfg["optim"]
    total = model.cfg["train"]["steps"]
    p = {k: v.detach().to(torch.float64).clone() for k, v in params.items()}
    opt = make_adamw(model, p)
    for k, grads in enumerate(step_grads):
        g = {n: grads[n].detach().to(torch.float64).clone() for n in p}
        clip_grads(g, o["grad_clip"])
        opt.step(p, g, learning_rate(o, total, k))
        for v in p.values():
            v.copy_(v.to(storage))
    return {f"param_after.{n}": v for n, v in p.items()}


def random_batch(model, batch_size, seed):
    """idx and targets, int64 (B, seq_len), uniform over the vocabulary."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, model.m["seq_len"])
    idx = torch.randint(0, model.V, shape, generator=gen, dtype=torch.int64)
    targets = torch.randint(0, model.V, shape, generator=gen, dtype=torch.int64)
    return idx, targets
