"""The PyTorch oracle: normlab's model and loss written from README.md's formulas.

Independent of normlab's C++ by construction: everything here follows tests/reference/README.md
(the block plan table, the norm / RoPE / attention / MLP / loss formulas). It runs in float64 by
default so that, against normlab's float32, the oracle's own round-off is negligible. The
configuration (defaults, TOML writer) is ref_config.py; the optimiser (AdamW with PyTorch
semantics, the learning-rate schedule) is ref_optim.py.

    cfg = make_config(model={"placement": "peri", "n_layer": 2, ...})   # ref_config
    model = RefModel(cfg)
    params = model.random_params(seed=0)                   # {normlab name: tensor}
    logits, loss, ce, zl = model.forward(params, idx, targets)
    out = model.loss_and_grads(params, idx, targets)       # adds {"grad.<name>": ...}

μP (tests/py/test_mup_parity.py) overrides two pieces from outside, leaving the formulas above as
they are: `RefModel(cfg, attn_scale=s)` scales the scores by s instead of the config's rule, and
`RefModel(cfg, head=f)` computes the logits as f(x) (e.g. mup's MuReadout module) instead of
x @ W^T (the final soft-cap still follows), and `RefModel(cfg, gate=g)` computes the attention
gate's logits of block `prefix` as g(prefix, u) instead of u @ W_g^T (e.g. a MuReadout module).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ref_config import head_size, kv_heads, layer_types, rope_inv_freq

# ----------------------------------------------------------------------------------------------
# Block plan (README: "Forward", the placement table)


@dataclass(frozen=True)
class SublayerPlan:
    norm_in: bool
    norm_out: bool
    alpha: float
    norm_after_add: bool
    shortcut: bool = False   # Admin (init = admin): s = omega * x + g, omega = `res_omega` (C)
    norm_qkv: bool = False   # HybridNorm's attention: q, k and v each normalised


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


def sublayer_plans(model_cfg):
    """(attention plan, MLP plan) per block: block_plans' plan twice, with Admin's shortcut on
    every post-norm sublayer under init = admin (README, "Admin"); HybridNorm's two different
    sublayers under placement = hybrid (README, "HybridNorm")."""
    L = model_cfg["n_layer"]
    if model_cfg["placement"] == "hybrid":
        attn = SublayerPlan(False, False, 1.0, True, norm_qkv=True)
        mlp = SublayerPlan(False, False, 1.0, False)
        pre_attn = SublayerPlan(True, False, 1.0, False, norm_qkv=True)
        pre_mlp = SublayerPlan(True, False, 1.0, False)
        first_pre = model_cfg["hybrid_first_pre"]
        return [(pre_attn, pre_mlp) if first_pre and l == 0 else (attn, mlp) for l in range(L)]
    out = []
    for plan in block_plans(model_cfg):
        if model_cfg["init"] == "admin" and plan.norm_after_add:
            plan = SublayerPlan(plan.norm_in, plan.norm_out, plan.alpha, True, shortcut=True)
        out.append((plan, plan))
    return out


# ----------------------------------------------------------------------------------------------
# Parameter table


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple
    kind: str  # "embedding", "linear" (a matrix), "gain", "bias", "alpha", "shift" (scalars),
    #            "res_scale" (the residual branch scale: (1,) or (d_model,)), "res_omega"
    #            (Admin's shortcut scale, (d_model,)), "sink" (the learned attention sink
    #            logits, (n_head,))


class RefModel:
    def __init__(self, cfg, dtype=torch.float64, attn_scale=None, head=None, shortcut=None,
                 gate=None):
        """attn_scale: the attention-score scale (None: the config's, attn_scale or 1/sqrt(D));
        head: a callable x (B, T, C) -> logits (B, T, V) that replaces x @ W^T (None: the
        config's head, tied or lm_head.weight); shortcut: a callable (x, g, omega) -> s that
        replaces Admin's s = omega * x + g (e.g. admin-torch's OmegaResidual); gate: a callable
        (prefix, u) -> the gate logits that replaces u @ W_g^T."""
        self.cfg = cfg
        self.gate = gate
        self.attn_scale = attn_scale
        self.head = head
        self.shortcut = shortcut
        self.profile = None  # Admin's profiling pass while admin_profile runs: {"ratio": r}
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
        self.pairs = sublayer_plans(m)            # (attention, MLP) plan per block
        self.plans = [a for a, _ in self.pairs]  # the attention plans (all but hybrid: both)
        # The final norm exists iff the last sublayer of the last block has no norm_after_add.
        self.has_final_norm = not self.pairs[-1][1].norm_after_add
        # The q/k(/v) norms' kind: qk_norm's; HybridNorm's default to the residual norm's.
        self.qk_kind = m["qk_norm"]
        if m["placement"] == "hybrid" and self.qk_kind == "none":
            self.qk_kind = m["norm"]
        self.specs = self._param_specs()

    # -- parameters ---------------------------------------------------------------------------
    def _norm_specs(self, prefix, kind, width, specs):
        specs.append(ParamSpec(f"{prefix}.weight", (width,), "gain"))
        if kind in ("layernorm", "dyt", "derf") and self.m["norm_bias"]:
            specs.append(ParamSpec(f"{prefix}.bias", (width,), "bias"))
        if kind in ("dyt", "derf"):
            specs.append(ParamSpec(f"{prefix}.alpha", (1,), "alpha"))
        if kind == "derf":
            specs.append(ParamSpec(f"{prefix}.shift", (1,), "shift"))

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
        for l, pair in enumerate(self.pairs):
            for sub, plan in zip(("attn", "mlp"), pair):
                p = f"blocks.{l}.{sub}"
                if plan.norm_in:
                    self._norm_specs(f"{p}.norm_in", m["norm"], C, specs)
                if sub == "attn":
                    self._linear_specs(f"{p}.wqkv", Cq + 2 * Ckv, C, specs, qkv_bias)
                    head = m["qk_norm_scope"] == "head"
                    if self.qk_kind != "none":
                        self._norm_specs(f"{p}.q_norm", self.qk_kind, D if head else Cq, specs)
                        self._norm_specs(f"{p}.k_norm", self.qk_kind, D if head else Ckv, specs)
                    if plan.norm_qkv:
                        self._norm_specs(f"{p}.v_norm", self.qk_kind, D if head else Ckv, specs)
                    if m["attn_gate"] != "none":  # README: "Attention gate"
                        width = self.H if m["attn_gate"] == "head" else Cq
                        self._linear_specs(f"{p}.wg", width, C, specs, False)
                    if m["attn_sink"] == "learned":  # README: "Attention sink"
                        specs.append(ParamSpec(f"{p}.sink", (self.H,), "sink"))
                    self._linear_specs(f"{p}.wo", C, Cq, specs, out_bias)
                else:
                    gated = m["mlp"] in ("swiglu", "geglu")
                    self._linear_specs(f"{p}.w_in", 2 * F_ if gated else F_, C, specs, mlp_bias)
                    self._linear_specs(f"{p}.w_out", C, F_, specs, mlp_bias)
                if plan.norm_out:
                    self._norm_specs(f"{p}.norm_out", m["norm"], C, specs)
                if plan.norm_after_add:
                    self._norm_specs(f"{p}.norm_post", m["norm"], C, specs)
                if m["residual_scale"] != "none":  # README: "Residual branch scale"
                    width = C if m["residual_scale"] == "layerscale" else 1
                    specs.append(ParamSpec(f"{p}.res_scale", (width,), "res_scale"))
                if plan.shortcut:  # README: "Admin"
                    specs.append(ParamSpec(f"{p}.res_omega", (C,), "res_omega"))
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
        tok_emb.weight is an embedding); never norm gains, biases, alphas, shifts or residual
        branch scales."""
        kind = {s.name: s.kind for s in self.specs}[name]
        if kind == "linear":
            return True
        if kind == "embedding":
            return self.cfg["optim"]["decay_embeddings"]
        return False

    def random_params(self, seed, dtype=torch.float32):
        """Random, non-trivial values for every parameter: effective norm gains g0 + w spread over
        [0.5, 1.5], biases ~ N(0, 0.2^2), DyT/Derf alphas and residual branch scales over [0.5, 1.5]
        (so that tanh and erf
        both bend and saturate), Derf shifts ~ N(0, 0.2^2), learned attention-sink logits
        ~ N(0, 1), linear weights ~ N(0, 1/fan_in) (q/k
        rows a bit larger so that soft-caps saturate), embeddings ~ N(0, 0.5^2). Rounded to
        float32 so that the oracle and normlab start from the same numbers."""
        gen = torch.Generator().manual_seed(seed)
        g0 = self.m["norm_gain_offset"]
        params = {}
        for s in self.specs:
            if s.kind == "gain":
                t = torch.rand(s.shape, generator=gen, dtype=torch.float64) + 0.5 - g0
            elif s.kind == "sink":
                t = torch.randn(s.shape, generator=gen, dtype=torch.float64)
            elif s.kind in ("bias", "shift"):
                t = 0.2 * torch.randn(s.shape, generator=gen, dtype=torch.float64)
            elif s.kind in ("alpha", "res_scale", "res_omega"):
                t = torch.rand(s.shape, generator=gen, dtype=torch.float64) + 0.5
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
        RMSNorm: x / sqrt(mean(x^2) + eps) * (g0 + w). Over the last dimension.
        DyT (Zhu et al. 2025): tanh(alpha x) * (g0 + w) + b; Derf (Chen et al. 2025):
        erf(alpha x + s) * (g0 + w) + b; alpha and s scalars, elementwise (no statistics)."""
        kind = kind or self.m["norm"]
        eps, g0 = self.m["norm_eps"], self.m["norm_gain_offset"]
        if kind == "dyt":
            y = torch.tanh(params[f"{prefix}.alpha"] * x)
        elif kind == "derf":
            y = torch.erf(params[f"{prefix}.alpha"] * x + params[f"{prefix}.shift"])
        elif kind == "layernorm":
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
        qk_kind, scope, position = self.qk_kind, m["qk_norm_scope"], m["qk_norm_position"]
        norm_v = self.pairs[layer][0].norm_qkv if layer is not None else False
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
        if norm_v:  # HybridNorm: the values too, with the QK norms' kind and scope
            v = qk_norm(v, "v")
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
        if self.attn_scale is not None:
            scale = self.attn_scale
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
        sink = m["attn_sink"]
        if sink == "none":
            p = torch.softmax(s, dim=-1)
        else:
            # README "Attention sink": one more logit z_h per head (0 for "one"), never capped,
            # whose value is zero: softmax over [s_i, z_h], the sink's column dropped.
            z = (params[f"{prefix}.sink"] if sink == "learned"
                 else torch.zeros(H, dtype=s.dtype))
            zcol = z.to(s.dtype).view(1, H, 1, 1).expand(B, H, T, 1)
            p = torch.softmax(torch.cat([s, zcol], dim=-1), dim=-1)[..., :T]
        o = merge(p @ v)  # (B, T, Cq): head h in columns [hD, (h+1)D)
        gate = m["attn_gate"]
        if gate != "none":
            # README "Attention gate": o' = sigmoid(u W_g^T) (.) o, per head or per value.
            z = (self.gate(prefix, u) if self.gate is not None
                 else u @ params[f"{prefix}.wg.weight"].T)
            gz = torch.sigmoid(z)  # (B, T, H) or (B, T, Cq)
            if gate == "head":
                gz = gz.repeat_interleave(D, dim=-1)
            o = gz * o
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
        """u = N_in(x)?; f = F(u); g = N_out(f)?; s = alpha x + a * g; x' = N_post(s)?
        (a: the residual branch scale, a scalar or one value per channel, broadcast over the
        last dimension; 1 when model.residual_scale = none)"""
        u = self.norm(x, params, f"{prefix}.norm_in") if plan.norm_in else x
        f = branch(u, params, prefix)
        g = self.norm(f, params, f"{prefix}.norm_out") if plan.norm_out else f
        if self.m["residual_scale"] != "none":
            g = params[f"{prefix}.res_scale"] * g
        if plan.shortcut:
            s = self._admin_sum(x, g, params, prefix)
        else:
            s = plan.alpha * x + g
        return self.norm(s, params, f"{prefix}.norm_post") if plan.norm_after_add else s

    def _admin_sum(self, x, g, params, prefix):
        """Admin: s = omega * x + g. While profiling (Transformer-Clinic's adaptive-profiling),
        omega is first set to the running ratio r (every channel; r = 1 before the first
        sublayer), then r = sqrt(Var[omega x] + Var[g]) over every element (population)."""
        name = f"{prefix}.res_omega"
        if self.profile is not None:
            with torch.no_grad():
                params[name].fill_(self.profile["ratio"])
                xs = (x * params[name]).double()
                self.profile["ratio"] = math.sqrt(xs.var(unbiased=False).item() +
                                                  g.double().var(unbiased=False).item())
        if self.shortcut is not None:
            return self.shortcut(x, g, params[name])
        return params[name] * x + g

    def admin_profile(self, params, idx):
        """Admin's profiling pass over idx (B, T): sets every res_omega in params, in place."""
        self.profile = {"ratio": 1.0}
        try:
            with torch.no_grad():
                T = idx.shape[1]
                x = params["tok_emb.weight"][idx] * self.m["embed_scale"]
                if self.m["pos"] == "learned":
                    x = x + params["pos_emb.weight"][:T]
                for l in range(self.L):
                    x = self.block(x, params, l)
        finally:
            self.profile = None

    def block(self, x, params, layer):
        attn, mlp = self.pairs[layer]
        x = self.sublayer(x, params, f"blocks.{layer}.attn", attn, self.attention)
        return self.sublayer(x, params, f"blocks.{layer}.mlp", mlp, self.mlp)

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
        if self.head is not None:
            logits = self.head(x)
        else:
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


def random_batch(model, batch_size, seed):
    """idx and targets, int64 (B, seq_len), uniform over the vocabulary."""
    gen = torch.Generator().manual_seed(seed)
    shape = (batch_size, model.m["seq_len"])
    idx = torch.randint(0, model.V, shape, generator=gen, dtype=torch.int64)
    targets = torch.randint(0, model.V, shape, generator=gen, dtype=torch.int64)
    return idx, targets
