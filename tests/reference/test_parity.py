"""Whole-model parity: normlab's parity_driver against the PyTorch oracle (ref_model.py).

Every option value appears with every placement: a covering design of 10 tiny configurations per
placement (L=2, or 3 for mix; C=16; H=2 or 4; F=24; T=8; V=32; B=2). For each case the driver
gets CFG.toml, the weights and a batch, and its logits, losses, every gradient, and the
parameter updates (param_after - param_before) and losses over 3 AdamW steps are compared to the
oracle's at relative tolerance 1e-4.

    cd tests/reference && NORMLAB_BUILD_DIR=/work/main/build python -m pytest -q -s test_parity.py
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import harness
import ref_config
import ref_model
import ref_optim
from ref_config import make_config
from ref_model import RefModel

torch.set_num_threads(1)

# nGPT (placement = ngpt) is held to its PyPI reference, ngpt-pytorch, by tests/py/test_ngpt_parity.py
# rather than to this oracle (which has no unit-sphere model).
PLACEMENTS = tuple(p for p in ref_config.CHOICES["placement"] if p != "ngpt")
CASES_PER_PLACEMENT = 10
ADAM_STEPS = 3

# (norm, norm_bias): RMSNorm with norm_bias = true has no bias, but a LayerNorm QK-norm then does.
# The attention-layout cases take the first four only.
NORMS = [("layernorm", True), ("layernorm", False), ("rmsnorm", False), ("rmsnorm", True),
         ("dyt", False), ("dyt", True), ("derf", False), ("derf", True)]
QK_NORMS = [("none", "head", "pre_rope"), ("rmsnorm", "head", "pre_rope"),
            ("layernorm", "full", "pre_rope"), ("rmsnorm", "full", "post_rope"),
            ("layernorm", "head", "post_rope"), ("dyt", "head", "pre_rope"),
            ("derf", "full", "post_rope")]
MLPS = ref_config.CHOICES["mlp"]
RESIDUAL_SCALES = ref_config.CHOICES["residual_scale"]
ATTN_GATES = ref_config.CHOICES["attn_gate"]
ATTN_SINKS = ref_config.CHOICES["attn_sink"]


def _parity(x):
    return bin(x).count("1") % 2


def case_config(placement, i):
    """Configuration i of a placement. Binary options take the columns of an 8-run two-level
    orthogonal array (parities of masks of r = (i + 3 * placement index) mod 8), so any two of them
    meet in all four combinations within a placement; multi-level options cycle with different
    strides; rarer extras rotate."""
    pi = PLACEMENTS.index(placement)
    j = i + 3 * pi
    r = j % 8
    norm, norm_bias = NORMS[j % 8]
    qk, scope, position = QK_NORMS[(2 * j + pi) % 7]
    capped = _parity(r & 1)
    model = {
        "vocab_size": 32, "n_layer": 3 if placement == "mix" else 2, "d_model": 16,
        "n_head": 4 if _parity(r & 6) else 2, "d_ff": 24, "seq_len": 8,
        "placement": placement, "norm": norm, "norm_bias": norm_bias,
        "qk_norm": qk, "qk_norm_scope": scope, "qk_norm_position": position,
        "pos": "learned" if _parity(r & 4) else "rope",
        "rope_theta": 500.0 if j % 2 else 10000.0,
        "mlp": MLPS[(j // 2 + pi) % 4],
        "bias": bool(_parity(r & 3)), "tie_embeddings": bool(_parity(r & 5)),
        "attn_softcap": 1.5 if capped else 0.0, "final_softcap": 1.5 if capped else 0.0,
        "norm_gain_offset": 1.0 if j % 3 == 0 else 0.0,
        "embed_scale": 4.0 if j % 3 == 1 else 1.0,
        "attn_scale": 0.3 if j % 3 == 2 else 0.0,
    }
    if placement == "mix":  # ceil(ratio * 3) post blocks: 2 (final norm), 3 (none), 1
        model["mix_ratio"] = {0: 1.0, 3: 0.2}.get(i % 5, 0.5)
    # The residual branch scale cycles through its values (DeepNorm refuses every one but none);
    # random_params starts the scales over [0.5, 1.5], so the init keys do not matter here.
    if placement != "deepnorm":
        model["residual_scale"] = RESIDUAL_SCALES[(i + pi) % 4]
    # Admin's shortcut scale (res_omega) on post-norm sublayers without a residual scale;
    # HybridNorm* (block 0 Pre-Norm) on every other hybrid case. random_params sets the omegas, so
    # the profiling pass is not involved here (tests/py/test_admin_parity.py holds it).
    if placement in ("post", "mix") and model.get("residual_scale", "none") == "none":
        model["init"] = "admin"
    if placement == "hybrid":
        model["hybrid_first_pre"] = i % 2 == 1
    # Attention gates and sinks cycle with every placement.
    model["attn_gate"] = ATTN_GATES[(i + 2 * pi) % 3]
    model["attn_sink"] = ATTN_SINKS[(i // 3 + pi) % 3]
    # eps = 1e-4, not 1e-8: Adam's step g / (|g| + eps) has slope 1 / eps at g = 0, so with
    # eps = 1e-8 float32 round-off in near-zero gradients (exactly zero ones included: the key
    # bias under a shift-invariant softmax) moves parameters by up to lr per step, and no two
    # correct implementations agree to 1e-4 (README, "Tolerances").
    optim = {"lr": 1e-2, "weight_decay": 0.1, "grad_clip": 1.0, "warmup_steps": 2,
             "schedule": "cosine", "min_lr_ratio": 0.1, "eps": 1e-4}
    if j % 5 == 2:  # progress 1/2 at the last step: the decay formulas, not only their start
        optim.update(warmup_steps=1, schedule="linear")
    elif j % 5 == 3:
        optim.update(warmup_steps=1)
    elif j % 5 == 4:
        optim.update(decay_embeddings=False)
    train = {"seed": 1000 + 10 * pi + i, "z_loss": 1e-2 if _parity(r & 2) else 0.0,
             "steps": 3, "batch_size": 2}
    return make_config(model, optim, train)


def describe(cfg):
    m, o = cfg["model"], cfg["optim"]
    parts = [m["norm"] + ("+bias" if m["norm_bias"] else ""),
             "qk=" + (m["qk_norm"] if m["qk_norm"] == "none" else
                      f"{m['qk_norm']}/{m['qk_norm_scope']}/{m['qk_norm_position']}"),
             m["pos"], m["mlp"], "bias" if m["bias"] else "nobias",
             "tied" if m["tie_embeddings"] else "untied", f"H={m['n_head']}"]
    if m["attn_softcap"]:
        parts.append(f"caps={m['attn_softcap']:g}/{m['final_softcap']:g}")
    if cfg["train"]["z_loss"]:
        parts.append(f"zloss={cfg['train']['z_loss']:g}")
    if m["placement"] == "mix":
        parts.append(f"mix_ratio={m['mix_ratio']:g}")
    if m["residual_scale"] != "none":
        parts.append(m["residual_scale"])
    if m["init"] == "admin":
        parts.append("admin")
    if m["hybrid_first_pre"]:
        parts.append("hybrid*")
    if m["attn_gate"] != "none":
        parts.append(f"gate={m['attn_gate']}")
    if m["attn_sink"] != "none":
        parts.append(f"sink={m['attn_sink']}")
    for key, default in (("norm_gain_offset", 0.0), ("embed_scale", 1.0), ("attn_scale", 0.0)):
        if m[key] != default:
            parts.append(f"{key}={m[key]:g}")
    if o["schedule"] != "cosine" or o["warmup_steps"] != 2:
        parts.append(f"{o['schedule']}/warmup{o['warmup_steps']}")
    if not o["decay_embeddings"]:
        parts.append("no-emb-decay")
    return ", ".join(parts)


CASES = [(f"{p}-{i:02d}", case_config(p, i)) for p in PLACEMENTS for i in range(CASES_PER_PLACEMENT)]

# ----------------------------------------------------------------------------------------------
# Attention layouts (issue #18): grouped-query attention, explicit head size, sliding-window layers
# with per-type RoPE bases, scaled RoPE, per-group biases. Four configurations per placement, in
# which each of these option values meets every placement (test_attention_design_covers...), on
# top of the other options cycling as above. T = 8, so windows of 2-5 keys cut every sequence.
ATTN_CASES_PER_PLACEMENT = 4
# (n_head, n_kv_head, head_dim): 8 query heads over 2 kv heads with D = 4 != C/H = 2; multi-query
# with D = 6; 8 over 2 with the default D = C/H = 2; 2 heads, n_kv_head = n_head written out,
# D = 12 (queries 24 wide for C = 16).
ATTN_HEADS = [(8, 2, 4), (4, 1, 6), (8, 2, 0), (2, 2, 12)]
# (layer_pattern for L = 2, for L = 3 (mix), sliding_window, rope_local_theta)
ATTN_LAYERS = [("every:2", "every:2", 3, 100.0), ("global,sliding", "global,sliding,sliding", 2, 0.0),
               ("sliding", "sliding", 4, 0.0), ("sliding,global", "sliding,global,global", 5, 50.0)]
# Llama 3.1 scaling with original contexts 32 and 64 (T = 8): wavelength bounds [4, 32] and
# [8, 64]. At D = 4..12 and theta 10000 the first interpolates every frequency it keeps in the
# second (2 pi), both divide the low ones; D = 2 (one frequency, 2 pi) only ever takes the first.
ROPE_SCALINGS = [{"rope_scaling": "llama3", "rope_factor": 4.0, "rope_low_freq_factor": 1.0,
                  "rope_high_freq_factor": 8.0, "rope_original_seq_len": 32},
                 {"rope_scaling": "linear", "rope_factor": 2.5},
                 {"rope_scaling": "none"},
                 {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_low_freq_factor": 1.0,
                  "rope_high_freq_factor": 8.0, "rope_original_seq_len": 64}]
# (attn_qkv_bias, attn_out_bias, mlp_bias)
BIAS_GROUPS = [(True, False, False), (False, True, True), (False, False, True), (True, True, False)]
ATTN_QK = [("rmsnorm", "head", "pre_rope"), ("layernorm", "full", "post_rope"),
           ("rmsnorm", "full", "pre_rope"), ("layernorm", "head", "post_rope"),
           ("none", "head", "pre_rope")]


def attn_case_config(placement, i):
    """Attention-layout configuration i of a placement: the layout options of index i (so every
    placement sees all four), the other options shifted by the placement."""
    pi = PLACEMENTS.index(placement)
    j = i + pi
    H, Hkv, D = ATTN_HEADS[i]
    pattern2, pattern3, window, local_theta = ATTN_LAYERS[(i + pi) % 4 if pi % 2 else i]
    qkv_b, out_b, mlp_b = BIAS_GROUPS[(i + 2 * pi) % 4]
    qk, scope, position = ATTN_QK[(i + pi) % 5]
    norm, norm_bias = NORMS[j % 4]
    rope_index = (i + pi) % 4
    if ref_config.head_size({"head_dim": D, "d_model": 16, "n_head": H}) == 2 and rope_index == 3:
        rope_index = 0  # the second llama3 keeps D = 2's only frequency: no scaling at all
    if placement == "hybrid" and qk == "layernorm" and scope == "head" and \
            ref_config.head_size({"head_dim": D, "d_model": 16, "n_head": H}) == 2:
        # HybridNorm normalises the values too: a LayerNorm over a 2-feature value head (x - mean
        # is +-(x1 - x2) / 2) is so ill-conditioned that float32 round-off alone reaches the
        # tolerance (the oracle's own float32 run differs from its float64 by 4.8e-5 in a wqkv
        # gradient); RMSNorm over the same heads instead
        qk = "rmsnorm"
    capped = (i + pi) % 3 == 0
    mix = placement == "mix"
    model = {
        "vocab_size": 32, "n_layer": 3 if mix else 2, "d_model": 16, "n_head": H, "n_kv_head": Hkv,
        "head_dim": D, "d_ff": 24, "seq_len": 8, "placement": placement, "norm": norm,
        "norm_bias": norm_bias, "qk_norm": qk, "qk_norm_scope": scope, "qk_norm_position": position,
        "pos": "rope", "rope_theta": 10000.0, "mlp": MLPS[(j + 1) % 4],
        "layer_pattern": pattern3 if mix else pattern2, "sliding_window": window,
        "rope_local_theta": local_theta, **ROPE_SCALINGS[rope_index],
        "attn_qkv_bias": qkv_b, "attn_out_bias": out_b, "mlp_bias": mlp_b,
        "tie_embeddings": j % 2 == 0,
        "attn_softcap": 1.5 if capped else 0.0, "final_softcap": 1.5 if capped else 0.0,
        "norm_gain_offset": 1.0 if j % 3 == 1 else 0.0,
    }
    if mix:
        model["mix_ratio"] = 0.5
    optim = {"lr": 1e-2, "weight_decay": 0.1, "grad_clip": 1.0, "warmup_steps": 2,
             "schedule": "cosine", "min_lr_ratio": 0.1, "eps": 1e-4}
    train = {"seed": 2000 + 10 * pi + i, "z_loss": 1e-2 if j % 2 else 0.0, "steps": 3,
             "batch_size": 2}
    return make_config(model, optim, train)


def describe_attention(cfg):
    m = cfg["model"]
    parts = [f"H={m['n_head']}/kv={m['n_kv_head']}/D={ref_config.head_size(m)}",
             f"{m['layer_pattern']}/W={m['sliding_window']}"]
    if m["rope_local_theta"]:
        parts.append(f"local_theta={m['rope_local_theta']:g}")
    if m["rope_scaling"] != "none":
        parts.append(f"{m['rope_scaling']}x{m['rope_factor']:g}")
    parts.append("bias=" + "+".join(g for g, on in (("qkv", m["attn_qkv_bias"]),
                                                     ("out", m["attn_out_bias"]),
                                                     ("mlp", m["mlp_bias"])) if on))
    return ", ".join(parts) + "; " + describe(cfg)


ATTN_CASES = [(f"attn-{p}-{i}", attn_case_config(p, i)) for p in PLACEMENTS
              for i in range(ATTN_CASES_PER_PLACEMENT)]


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_parity")
    yield s
    s.emit()


# ----------------------------------------------------------------------------------------------
# The design itself and the oracle's own sanity (no driver needed)


def test_design_covers_every_option_with_every_placement():
    wanted = {
        "norm": set(NORMS), "qk": set(QK_NORMS), "mlp": set(MLPS),
        "caps": {0.0, 1.5}, "z_loss": {0.0, 1e-2}, "pos": {"rope", "learned"},
        "bias": {True, False}, "tie": {True, False}, "n_head": {2, 4},
        "norm_gain_offset": {0.0, 1.0}, "embed_scale": {1.0, 4.0}, "attn_scale": {0.0, 0.3},
    }
    for p in PLACEMENTS:
        seen = {k: set() for k in list(wanted) + ["residual_scale", "attn_gate", "attn_sink"]}
        for _, cfg in (c for c in CASES if c[1]["model"]["placement"] == p):
            m = cfg["model"]
            seen["norm"].add((m["norm"], m["norm_bias"]))
            seen["qk"].add((m["qk_norm"], m["qk_norm_scope"], m["qk_norm_position"]))
            seen["mlp"].add(m["mlp"])
            seen["caps"].add(m["attn_softcap"])
            seen["z_loss"].add(cfg["train"]["z_loss"])
            seen["pos"].add(m["pos"])
            seen["bias"].add(m["bias"])
            seen["tie"].add(m["tie_embeddings"])
            seen["n_head"].add(m["n_head"])
            for k in ("norm_gain_offset", "embed_scale", "attn_scale", "residual_scale",
                      "attn_gate", "attn_sink"):
                seen[k].add(m[k])
        want = dict(wanted, residual_scale={"none"} if p == "deepnorm" else set(RESIDUAL_SCALES),
                    attn_gate=set(ATTN_GATES), attn_sink=set(ATTN_SINKS))
        for k, values in want.items():
            assert seen[k] == values, f"placement {p}: option {k} covers {seen[k]}, want {values}"
    for p in ("post", "mix"):  # Admin where there are post-norm sublayers
        assert any(c["model"]["init"] == "admin" for _, c in CASES if c["model"]["placement"] == p)
    assert {c["model"]["hybrid_first_pre"] for _, c in CASES
            if c["model"]["placement"] == "hybrid"} == {True, False}
    mix_ratios = {c["model"]["mix_ratio"] for _, c in CASES if c["model"]["placement"] == "mix"}
    assert mix_ratios == {0.2, 0.5, 1.0}


def test_attention_design_covers_every_option_with_every_placement():
    for p in PLACEMENTS:
        cases = [c for _, c in ATTN_CASES if c["model"]["placement"] == p]
        ms = [c["model"] for c in cases]
        T = ms[0]["seq_len"]
        heads = {(m["n_head"], ref_config.kv_heads(m)) for m in ms}
        assert {(8, 2), (4, 1)} <= heads, (p, heads)  # GQA 8 over 2, and MQA
        assert any(ref_config.head_size(m) != m["d_model"] // m["n_head"] for m in ms), p
        assert any(m["n_head"] * ref_config.head_size(m) != m["d_model"] for m in ms), p
        patterns = {m["layer_pattern"].split(":")[0] if "every" in m["layer_pattern"] else
                    ("list" if "," in m["layer_pattern"] else m["layer_pattern"]) for m in ms}
        assert {"every", "list", "sliding"} <= patterns, (p, patterns)
        for m in ms:
            types = ref_config.layer_types(m)
            assert 0 < m["sliding_window"] < T and any(types), (p, m["layer_pattern"])
        # A sliding layer with its own base, and a sliding layer that shares the global RoPE.
        assert any(m["rope_local_theta"] > 0 for m in ms), p
        assert any(m["rope_local_theta"] == 0 and m["rope_scaling"] != "none" for m in ms), p
        assert {"none", "linear", "llama3"} == {m["rope_scaling"] for m in ms}, p
        for group in ("attn_qkv_bias", "attn_out_bias", "mlp_bias"):
            assert {True, False} == {m[group] for m in ms}, (p, group)
        assert {"head", "full"} == {m["qk_norm_scope"] for m in ms if m["qk_norm"] != "none"}, p
        assert {"pre_rope", "post_rope"} == {m["qk_norm_position"] for m in ms
                                             if m["qk_norm"] != "none"}, p
    # Every llama3 case changes some frequency; together they keep, interpolate and divide.
    bands = set()
    for _, cfg in ATTN_CASES:
        m = cfg["model"]
        if m["rope_scaling"] != "llama3":
            continue
        D = ref_config.head_size(m)
        plain = m["rope_theta"] ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D)
        ratio = ref_config.rope_inv_freq(m, False) / plain
        assert (ratio < 1).any(), (D, ratio)
        for r in ratio.tolist():
            bands.add("kept" if r == 1 else "divided" if math.isclose(r, 1 / m["rope_factor"])
                      else "interpolated")
    assert bands == {"kept", "divided", "interpolated"}, bands


def test_oracle_attention_layouts():
    """GQA, head size, sliding windows and scaled RoPE of the oracle, against torch primitives
    and transformers' RoPE initialisation (modeling_rope_utils.ROPE_INIT_FUNCTIONS)."""
    torch.manual_seed(1)
    base = {"vocab_size": 32, "n_layer": 2, "d_model": 16, "n_head": 8, "n_kv_head": 2,
            "head_dim": 4, "d_ff": 24, "seq_len": 8, "pos": "learned"}
    model = RefModel(make_config({**base, "layer_pattern": "sliding,global", "sliding_window": 3}))
    assert (model.Cq, model.Ckv, model.D) == (32, 8, 4)
    shapes = {s.name: s.shape for s in model.specs}
    assert shapes["blocks.0.attn.wqkv.weight"] == (48, 16) and shapes["blocks.0.attn.wo.weight"] == (16, 32)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    params = {"a.wqkv.weight": torch.randn(48, 16, dtype=torch.float64) / 4,
              "a.wo.weight": torch.randn(16, 32, dtype=torch.float64) / 4}
    qkv = x @ params["a.wqkv.weight"].T
    qh = qkv[..., :32].reshape(2, 8, 8, 4).transpose(1, 2)
    kh = qkv[..., 32:40].reshape(2, 8, 2, 4).transpose(1, 2)
    vh = qkv[..., 40:].reshape(2, 8, 2, 4).transpose(1, 2)
    for layer, window in ((1, None), (0, 3)):
        i, j = torch.arange(8)[:, None], torch.arange(8)[None, :]
        allowed = (j <= i) if window is None else ((j <= i) & (j > i - window))
        o = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, enable_gqa=True)
        want = o.transpose(1, 2).reshape(2, 8, 32) @ params["a.wo.weight"].T
        got = model.attention(x, params, "a", layer=layer)
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    # (SDPA's enable_gqa: query head h reads kv head h // (H / Hkv), as the oracle.)
    for pattern, types in (("every:3", [True, True, False, True, True, False]),
                           ("every:1", [False] * 6), ("sliding", [True] * 6)):
        assert ref_config.layer_types({"n_layer": 6, "layer_pattern": pattern}) == types
    assert ref_config.layer_types({"n_layer": 3, "layer_pattern": "global, sliding,global"}) == \
        [False, True, False]
    with pytest.raises(ValueError):
        ref_config.layer_types({"n_layer": 3, "layer_pattern": "global,sliding"})

    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    for rope in ({"rope_scaling": "linear", "rope_factor": 2.5},
                 {"rope_scaling": "llama3", "rope_factor": 8.0, "rope_low_freq_factor": 1.0,
                  "rope_high_freq_factor": 4.0, "rope_original_seq_len": 8192},
                 {"rope_scaling": "llama3", "rope_factor": 4.0, "rope_low_freq_factor": 1.0,
                  "rope_high_freq_factor": 8.0, "rope_original_seq_len": 32}):
        for D, theta in ((128, 500000.0), (12, 10000.0), (4, 10000.0)):
            m = make_config({**base, "n_head": 2, "n_kv_head": 1, "head_dim": D, "pos": "rope",
                             "rope_theta": theta, **rope})["model"]
            hf_rope = {"rope_type": rope["rope_scaling"], "rope_theta": theta, "factor": rope["rope_factor"]}
            if rope["rope_scaling"] == "llama3":
                hf_rope.update(low_freq_factor=rope["rope_low_freq_factor"],
                               high_freq_factor=rope["rope_high_freq_factor"],
                               original_max_position_embeddings=rope["rope_original_seq_len"])
            hf_cfg = LlamaConfig(hidden_size=16, num_attention_heads=2, num_key_value_heads=1,
                                 head_dim=D, max_position_embeddings=16384, rope_parameters=hf_rope)
            hf_inv, _ = ROPE_INIT_FUNCTIONS[rope["rope_scaling"]](hf_cfg, "cpu")
            ours = ref_config.rope_inv_freq(m, False)
            # transformers computes in float32: agreement to float32 round-off
            torch.testing.assert_close(ours.float(), hf_inv.float(), rtol=3e-6, atol=0)
            m_local = {**m, "layer_pattern": "sliding", "sliding_window": 4, "rope_local_theta": 100.0}
            torch.testing.assert_close(ref_config.rope_inv_freq(m_local, True),
                                       100.0 ** (-2.0 * torch.arange(D // 2, dtype=torch.float64) / D))
            # rope_local_theta = 0: a sliding layer has the global (scaled) RoPE
            m_shared = {**m, "layer_pattern": "sliding", "sliding_window": 4}
            assert torch.equal(ref_config.rope_inv_freq(m_shared, True), ours)


def test_toml_round_trip():
    import tomllib
    for _, cfg in CASES[:7]:
        parsed = tomllib.loads(ref_config.to_toml(cfg))
        assert parsed == cfg
        for section, values in parsed.items():  # floats stay floats (embed_scale = 4.0, not 4)
            for k, v in values.items():
                assert type(v) is type(ref_config.DEFAULTS[section][k]), (section, k, v)


def _names(cfg):
    return set(RefModel(cfg).param_names())


def test_oracle_plan_table():
    base = {"vocab_size": 32, "n_layer": 2, "d_model": 16, "n_head": 2, "d_ff": 24, "seq_len": 8}

    def cfg(**kw):
        return make_config({**base, **kw})

    def kinds(names, sub):
        return {n.split(".")[3] for n in names if n.startswith(sub) and "norm" in n.split(".")[3]
                and not n.split(".")[3].startswith(("q_", "k_"))}

    expect = {  # placement: (norms of each sublayer, final norm)
        "post": ({"norm_post"}, False), "pre": ({"norm_in"}, True),
        "peri": ({"norm_in", "norm_out"}, True), "reordered": ({"norm_out"}, True),
        "deepnorm": ({"norm_post"}, False),
    }
    for placement, (norms, final) in expect.items():
        names = _names(cfg(placement=placement))
        for l in range(2):
            for sub in ("attn", "mlp"):
                assert kinds(names, f"blocks.{l}.{sub}.") == norms, (placement, l, sub)
        assert ("final_norm.weight" in names) == final, placement
        assert RefModel(cfg(placement=placement)).has_final_norm == final
    alphas = [p.alpha for p in RefModel(cfg(placement="deepnorm", n_layer=3)).plans]
    assert alphas == [6 ** 0.25] * 3
    assert all(p.alpha == 1.0 for p in RefModel(cfg(placement="peri")).plans)
    for ratio, n_post, final in ((0.5, 2, True), (1.0, 3, False), (0.2, 1, True), (0.0, 0, True)):
        model = RefModel(cfg(placement="mix", n_layer=3, mix_ratio=ratio))
        assert [p.norm_after_add for p in model.plans] == [l < n_post for l in range(3)], ratio
        assert [p.norm_in for p in model.plans] == [l >= n_post for l in range(3)], ratio
        assert model.has_final_norm == final, ratio
    # Bias presence and shapes.
    m = RefModel(cfg(placement="pre", norm="rmsnorm", norm_bias=True, qk_norm="layernorm",
                     qk_norm_scope="head", mlp="swiglu", bias=True, tie_embeddings=False,
                     pos="learned"))
    shapes = {s.name: s.shape for s in m.specs}
    assert "blocks.0.attn.norm_in.bias" not in shapes
    assert shapes["blocks.0.attn.q_norm.bias"] == (8,) and shapes["blocks.0.attn.k_norm.weight"] == (8,)
    assert shapes["blocks.0.mlp.w_in.weight"] == (48, 16) and shapes["blocks.0.mlp.w_out.weight"] == (16, 24)
    assert shapes["blocks.1.attn.wqkv.bias"] == (48,) and shapes["lm_head.weight"] == (32, 16)
    assert shapes["pos_emb.weight"] == (8, 16)
    assert not m.decayed("blocks.0.attn.q_norm.bias") and m.decayed("lm_head.weight")
    full = RefModel(cfg(qk_norm="rmsnorm", qk_norm_scope="full"))
    assert {s.shape for s in full.specs if "q_norm" in s.name} == {(16,)}


def test_oracle_pieces_match_torch_primitives():
    """The hand-written formulas against torch's own kernels, in float64."""
    torch.manual_seed(0)
    cfg = make_config({"vocab_size": 32, "n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 24,
                       "seq_len": 8, "norm_eps": 1e-5})
    model = RefModel(cfg)
    x = torch.randn(2, 8, 16, dtype=torch.float64)
    w, b = torch.rand(16, dtype=torch.float64) + 0.5, torch.randn(16, dtype=torch.float64)
    p = {"n.weight": w, "n.bias": b}
    torch.testing.assert_close(model.norm(x, p, "n", "layernorm"),
                               F.layer_norm(x, (16,), w, b, 1e-5), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(model.norm(x, {"n.weight": w}, "n", "rmsnorm"),
                               F.rms_norm(x, (16,), w, 1e-5), rtol=1e-12, atol=1e-12)
    h = 3 * torch.randn(100, dtype=torch.float64)
    torch.testing.assert_close(model.gelu_tanh(h), F.gelu(h, approximate="tanh"),
                               rtol=1e-12, atol=1e-12)
    # RoPE as a complex rotation of pairs (x[i], x[i + D/2]).
    q = torch.randn(2, 2, 8, 8, dtype=torch.float64)
    t = torch.arange(8, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-2.0 * torch.arange(4, dtype=torch.float64) / 8)
    z = torch.complex(q[..., :4], q[..., 4:]) * torch.exp(1j * t * freq)
    torch.testing.assert_close(model.rope(q), torch.cat([z.real, z.imag], -1), rtol=1e-12, atol=1e-12)
    # Causal attention without caps or QK-norm against scaled_dot_product_attention.
    C = 16
    params = {"a.wqkv.weight": torch.randn(3 * C, C, dtype=torch.float64) / 4,
              "a.wo.weight": torch.eye(C, dtype=torch.float64)}
    cfg["model"]["pos"] = "learned"
    got = RefModel(cfg).attention(x, params, "a")
    qkv = x @ params["a.wqkv.weight"].T
    qh, kh, vh = (qkv[..., i * C:(i + 1) * C].reshape(2, 8, 2, 8).transpose(1, 2) for i in range(3))
    want = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True).transpose(1, 2).reshape(2, 8, C)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)



def test_oracle_adamw_matches_torch_optim():
    """The oracle's clip + schedule + AdamW loop against torch.optim.AdamW with the same decay
    groups, clip_grad_norm_ and per-step learning rates."""
    cfg = CASES[7][1]
    cfg = make_config(cfg["model"], {**cfg["optim"], "decay_embeddings": False, "warmup_steps": 1,
                                     "schedule": "cosine"}, {**cfg["train"], "steps": 4})
    model = RefModel(cfg)
    params = model.random_params(seed=5)
    idx, targets = ref_model.random_batch(model, 2, seed=6)
    ours = ref_optim.adamw_run(model, params, idx, targets, n_steps=4)

    leaves = {n: v.double().clone().requires_grad_(True) for n, v in params.items()}
    o = cfg["optim"]
    decay = [leaves[n] for n in leaves if model.decayed(n)]
    no_decay = [leaves[n] for n in leaves if not model.decayed(n)]
    assert decay and no_decay and not model.decayed("tok_emb.weight")
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"])
    for k in range(4):
        opt.zero_grad()
        _, loss, _, _ = model.forward(leaves, idx, targets)
        torch.testing.assert_close(loss.reshape(1), ours[f"loss_step.{k}"], rtol=1e-12, atol=0)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(list(leaves.values()), o["grad_clip"])
        for group in opt.param_groups:
            group["lr"] = ref_optim.learning_rate(o, 4, k)
        opt.step()
    for n, v in leaves.items():
        torch.testing.assert_close(v.detach(), ours[f"param_after.{n}"], rtol=1e-12, atol=1e-14,
                                   msg=lambda m, n=n: f"{n}: {m}")
    # The schedule's shape: warmup 1, then cosine from lr to lr_min over steps 1..3.
    lrs = [ref_optim.learning_rate(o, 4, s) for s in range(5)]
    lr, lr_min = o["lr"], o["lr"] * o["min_lr_ratio"]
    assert lrs[0] == lr and math.isclose(lrs[1], lr) and math.isclose(lrs[4], lr_min)
    assert math.isclose(lrs[2], lr_min + (lr - lr_min) * 0.5 * (1 + math.cos(math.pi / 3)))


# ----------------------------------------------------------------------------------------------
# Parity against the C++ driver


@pytest.mark.parametrize("case_id,cfg", CASES + ATTN_CASES, ids=[c[0] for c in CASES + ATTN_CASES])
def test_parity(case_id, cfg, tmp_path, summary):
    model = RefModel(cfg)
    params = model.random_params(seed=cfg["train"]["seed"])
    idx, targets = ref_model.random_batch(model, cfg["train"]["batch_size"], seed=cfg["train"]["seed"] + 1)
    got = harness.run_driver(tmp_path, cfg, params, {"idx": idx, "targets": targets},
                             mode="model", adam_steps=ADAM_STEPS)
    label = f"{case_id} ({describe_attention(cfg) if case_id.startswith('attn-') else describe(cfg)})"

    names = model.param_names()
    got_grads = {k[len("grad."):] for k in got if k.startswith("grad.")}
    assert got_grads == set(names), (
        f"[{label}] grad.* names differ: driver only {sorted(got_grads - set(names))}, "
        f"oracle only {sorted(set(names) - got_grads)}")
    got_after = {k[len("param_after."):] for k in got if k.startswith("param_after.")}
    assert got_after == set(names), (
        f"[{label}] param_after.* names differ: driver only {sorted(got_after - set(names))}, "
        f"oracle only {sorted(set(names) - got_after)}")

    ref = model.loss_and_grads(params, idx, targets)
    ref.update(ref_optim.adamw_run(model, params, idx, targets, ADAM_STEPS))
    # What the optimizer did, not only where it left the parameter: the update (param_after -
    # param_before) is ~1e-2 of the parameter, so 1e-4 of the parameter lets 1% of the update go
    # wrong. The oracle's optimizer replays the steps on the driver's own gradients of each step:
    # against the oracle's trajectory (its own float64 gradients) no float32 implementation
    # reaches 1e-4 of the update, the oracle run in float32 included, because Adam's step
    # g / (|g| + eps) multiplies gradient round-off by lr / eps where |g| < eps (README,
    # "Tolerances"). Both start from the same float32 weights; the driver's difference of two
    # float32 values is exact in float64.
    step_grads = [{n: got[f"grad_step.{k}.{n}"] for n in names} for k in range(ADAM_STEPS)]
    replay = ref_optim.adamw_replay(model, params, step_grads)
    for n in names:
        got[f"update.{n}"] = got[f"param_after.{n}"].double() - params[n].double()
        ref[f"update.{n}"] = replay[f"param_after.{n}"] - params[n].double()
        # Both sides round the parameter to float32 after each step, and a float32 step that
        # differs from the float64 replay by round-off can land one unit in the last place of the
        # parameter away (a DyT alpha near 1 with an update of 4e-4: 1.6e-4 of it). As
        # test_optimizer_parity.py, the update is compared beyond one ulp of the parameter.
        diff = got[f"update.{n}"] - ref[f"update.{n}"]
        ulp = torch.from_numpy(np.spacing(np.abs(got[f"param_after.{n}"].numpy()))).double()
        got[f"update.{n}"] = ref[f"update.{n}"] + torch.sign(diff) * (diff.abs() - ulp).clamp(min=0)
    compared = (["logits", "loss", "ce", "z_loss"] + [f"grad.{n}" for n in names]
                + [f"grad_step.0.{n}" for n in names]
                + [f"loss_step.{k}" for k in range(ADAM_STEPS)] + [f"update.{n}" for n in names]
                + [f"param_after.{n}" for n in names])
    for n in names:  # step 0's gradients are the plain backward's, those of the oracle
        ref[f"grad_step.0.{n}"] = ref[f"grad.{n}"]
    harness.check(label, got, ref, compared, summary)
