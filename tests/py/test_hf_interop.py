"""normlab against Hugging Face transformers' own models (src/interop/hf.h, docs/interop.md).

For GPT-2, Llama, Mistral, Qwen 2, Qwen 3, Gemma 2, Gemma 3 (text) and OLMo 2: a tiny random model
built from a transformers config with the family's real structure (8 query heads over 2 kv heads or
multi-query, head_dim != hidden / heads, sliding windows of 3 keys at T = 8, Gemma 3's 5:1 layers
with local and global RoPE bases, Llama 3 RoPE scaling whose three bands all occur at these head
sizes, each family's biases; no download; norm gains randomised so they matter), saved with
save_pretrained, imported by tests/hf_driver, which writes normlab's logits, loss and gradients in
HF naming; all are compared with transformers (eager attention, eval mode, float32) at relative
tolerance 1e-4 per tensor. Round trips: HF -> import -> export gives identical tensors; a normlab
run (trained a few steps) -> `normlab export` -> AutoModelForCausalLM.from_pretrained gives
normlab's logits and gradients; `normlab generate` (greedy, KV cache) continues prompts longer
than the sliding window token for token as transformers' generate; options without a counterpart
are refused on export and import with a message naming them.

Run: cd tests/py && NORMLAB_BUILD_DIR=/path/to/build python -m pytest -q -s test_hf_interop.py
"""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import transformers  # noqa: E402  (required: scripts/install-deps.sh installs it; never skipped)
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForCausalLM,
    Gemma2Config,
    Gemma3TextConfig,
    GPT2Config,
    LlamaConfig,
    MistralConfig,
    Olmo2Config,
    Qwen2Config,
    Qwen3Config,
)

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

REL_TOL = 1e-4
FLOOR_FRAC = 1e-2  # as tests/reference/harness.py: error relative to max(max|ref|, 1% of the group)
TIMEOUT_S = 60
V, C, H, F, L, B, T, MAXPOS = 320, 32, 4, 48, 2, 2, 8, 16
ROPE = {"rope_type": "default", "rope_theta": 1000.0}


def build_dir():
    build = os.environ.get("NORMLAB_BUILD_DIR")
    if not build:
        pytest.fail("NORMLAB_BUILD_DIR is not set: point it at the CMake build directory", pytrace=False)
    return Path(build)


def tool(name):
    path = build_dir() / name
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"{path} not found or not executable; build the target first", pytrace=False)
    return str(path)


def run(cmd, expect_ok=True):
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=TIMEOUT_S)
    if expect_ok and proc.returncode != 0:
        pytest.fail(f"exit {proc.returncode}: {' '.join(map(str, cmd))}\n{proc.stdout}\n{proc.stderr}",
                    pytrace=False)
    return proc


# Families: tiny configs with each family's real structure. GQA: 8 query heads over 2 kv heads
# (KV_H) with head_dim HD = 6 != C / 8 = 4; multi-query for Gemma 3. Sliding windows of W = 3 keys
# (shorter than T = 8 and than the generate prompts). Llama 3 RoPE with original context 32 and
# high_freq_factor 8: at HD = 6, theta 1000 the frequencies (wavelengths 6.3, 63, 628) are
# interpolated, divided, divided.
GQA = dict(num_attention_heads=8, num_key_value_heads=2, head_dim=6)
W = 3
LLAMA3 = {"rope_type": "llama3", "rope_theta": 1000.0, "factor": 4.0, "low_freq_factor": 1.0,
          "high_freq_factor": 8.0, "original_max_position_embeddings": 32}


def hf_configs(V=V):
    common = dict(vocab_size=V, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=H,
                  hidden_size=C, intermediate_size=F, max_position_embeddings=MAXPOS,
                  pad_token_id=None, bos_token_id=None, eos_token_id=None)
    gqa = {**common, **GQA}
    return {
        "gpt2": GPT2Config(vocab_size=V, n_positions=MAXPOS, n_embd=C, n_layer=L, n_head=H, n_inner=F,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                           tie_word_embeddings=True, bos_token_id=None, eos_token_id=None),
        # Llama 3: GQA, head_dim, llama3 RoPE scaling; biases on q/k/v/o, none in the MLP; untied.
        "llama": LlamaConfig(**gqa, rms_norm_eps=1e-5, rope_parameters=dict(LLAMA3),
                             attention_bias=True, mlp_bias=False, tie_word_embeddings=False),
        # Mistral: GQA, one sliding window on every layer.
        "mistral": MistralConfig(**gqa, rms_norm_eps=1e-5, rope_parameters=dict(ROPE),
                                 sliding_window=W, tie_word_embeddings=False),
        # Qwen 2: GQA (head_dim = C / H), biases on q/k/v only, linear RoPE scaling, the second
        # layer sliding (use_sliding_window, max_window_layers = 1).
        "qwen2": Qwen2Config(**{**common, "num_attention_heads": 8, "num_key_value_heads": 2},
                             rms_norm_eps=1e-6,
                             rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1000.0},
                             use_sliding_window=True, sliding_window=W, max_window_layers=1,
                             tie_word_embeddings=True),
        # Qwen 3: GQA, head_dim, per-head QK RMSNorm, attention biases, the first layer sliding.
        "qwen3": Qwen3Config(**gqa, rms_norm_eps=1e-6, rope_parameters=dict(ROPE),
                             attention_bias=True, use_sliding_window=True, sliding_window=W,
                             layer_types=["sliding_attention", "full_attention"],
                             tie_word_embeddings=False),
        # Gemma 2: GQA, head_dim, both soft-caps on, query_pre_attn_scalar != head_dim, the
        # default alternating sliding/global layers.
        "gemma2": Gemma2Config(**gqa, query_pre_attn_scalar=12,
                               attn_logit_softcapping=2.0, final_logit_softcapping=5.0,
                               sliding_window=W, rope_parameters=dict(ROPE), rms_norm_eps=1e-6,
                               tie_word_embeddings=True),
        # Gemma 3: multi-query, head_dim, QK-norm, the default 5:1 sliding/global layers (6 of
        # them), local base 10000 against a global base 1e6 with linear scaling.
        "gemma3_text": Gemma3TextConfig(**{**common, "num_hidden_layers": 6, "num_attention_heads": 4,
                                           "num_key_value_heads": 1, "head_dim": 6},
                                        query_pre_attn_scalar=10, final_logit_softcapping=4.0,
                                        sliding_window=W,
                                        rope_parameters={
                                            "full_attention": {"rope_type": "linear", "factor": 4.0,
                                                               "rope_theta": 1e6},
                                            "sliding_attention": {"rope_type": "default",
                                                                  "rope_theta": 1e4}},
                                        tie_word_embeddings=False),
        # OLMo 2: GQA (q_norm over 8 * 6, k_norm over 2 * 6), attention biases.
        "olmo2": Olmo2Config(**gqa, rms_norm_eps=1e-5, rope_parameters=dict(ROPE),
                             attention_bias=True, tie_word_embeddings=True),
    }


# What each family's import must give (the normlab config keys the test checks).
EXPECT = {
    "llama": {"n_kv_head": 2, "head_dim": 6, "rope_scaling": "llama3", "attn_qkv_bias": True,
              "attn_out_bias": True, "mlp_bias": False},
    "mistral": {"n_kv_head": 2, "head_dim": 6, "layer_pattern": "sliding", "sliding_window": W},
    "qwen2": {"n_kv_head": 2, "head_dim": 0, "attn_qkv_bias": True, "attn_out_bias": False,
              "layer_pattern": "global,sliding", "sliding_window": W, "rope_scaling": "linear"},
    "qwen3": {"n_kv_head": 2, "head_dim": 6, "qk_norm": "rmsnorm", "layer_pattern": "every:2",
              "sliding_window": W},
    "gemma2": {"n_kv_head": 2, "head_dim": 6, "layer_pattern": "every:2", "sliding_window": W},
    "gemma3_text": {"n_kv_head": 1, "head_dim": 6, "layer_pattern": "every:6", "sliding_window": W,
                    "rope_theta": 1e6, "rope_local_theta": 1e4, "rope_scaling": "linear"},
    "olmo2": {"n_kv_head": 2, "head_dim": 6, "attn_qkv_bias": True, "attn_out_bias": True},
}


def randomise(model, family, seed):
    g = torch.Generator().manual_seed(seed)
    gemma = family.startswith("gemma")
    with torch.no_grad():
        for name, p in model.named_parameters():
            r = torch.randn(p.shape, generator=g)
            if "norm" in name or ".ln_" in name:
                if name.endswith("bias"):
                    p.copy_(0.1 * r)
                else:  # Gemma's gain is (1 + w)
                    p.copy_((0.0 if gemma else 1.0) + 0.3 * r)
            elif name.endswith("bias"):
                p.copy_(0.1 * r)
            elif "wte" in name or "wpe" in name or "embed_tokens" in name:
                p.copy_(0.5 * r)
            else:
                p.copy_(0.2 * r)


def make_hf_model(family, cfg, seed=0):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float()
    randomise(model, family, seed)
    return model.eval()


def make_batch(seed=1, vocab=V):
    g = torch.Generator().manual_seed(seed)
    return {"idx": torch.randint(0, vocab, (B, T), generator=g),
            "targets": torch.randint(0, vocab, (B, T), generator=g)}


def hf_forward_backward(model, batch):
    """Logits, mean cross-entropy and gradients (by parameter name) in float32."""
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["idx"]).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             batch["targets"].reshape(-1))
    loss.backward()
    out = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    for name, p in model.named_parameters():
        out["grad." + name] = p.grad.detach().clone()
    return out


def rel_errors(got, ref):
    """{name: rel error} over ref's names (harness.py's metric: floor 1% of the group's largest)."""
    def group(n):
        return n.split(".", 1)[0]
    scale = {}
    for n, r in ref.items():
        scale[group(n)] = max(scale.get(group(n), 0.0), float(r.abs().max()))
    errs = {}
    for n, r in ref.items():
        a, b = got[n].double(), r.double()
        assert a.shape == b.shape, f"{n}: normlab {tuple(a.shape)} vs HF {tuple(b.shape)}"
        denom = max(float(b.abs().max()), FLOOR_FRAC * scale[group(n)], 1e-30)
        errs[n] = float((a - b).abs().max()) / denom if torch.isfinite(a).all() else float("inf")
    return errs


class Summary:
    rows = []

    @classmethod
    def record(cls, case, errs):
        worst = {}
        for n, e in errs.items():
            g = "grad" if n.startswith("grad.") else n
            if g not in worst or e > worst[g][0]:
                worst[g] = (e, n)
        for g, (e, n) in sorted(worst.items()):
            cls.rows.append({"suite": "hf_interop", "case": case, "group": g, "max_rel": e,
                             "tensor": n, "tol": REL_TOL, "time": time.time()})
            print(f"  [{case}] {g:7s} max rel {e:.3e} ({n})")


@pytest.fixture(scope="module", autouse=True)
def summary():
    yield
    if Summary.rows:
        with open(build_dir() / "interop_summary.jsonl", "a") as f:
            for r in Summary.rows:
                f.write(json.dumps(r) + "\n")


def check(case, got, ref):
    missing = sorted(set(ref) - set(got))
    extra = sorted(n for n in set(got) - set(ref) if n.startswith("grad."))
    assert not missing and not extra, f"[{case}] names differ: missing {missing}, extra {extra}"
    errs = rel_errors(got, ref)
    Summary.record(case, errs)
    bad = sorted(((e, n) for n, e in errs.items() if not e <= REL_TOL), reverse=True)
    assert not bad, f"[{case}] over rel tol {REL_TOL}: " + ", ".join(f"{n} {e:.2e}" for e, n in bad)


FAMILIES = list(hf_configs())


@pytest.mark.parametrize("family", FAMILIES)
def test_import_matches_transformers(family, tmp_path):
    cfg = hf_configs()[family]
    model = make_hf_model(family, cfg)
    hf_dir = tmp_path / "hf"
    model.save_pretrained(hf_dir, safe_serialization=True)
    batch = make_batch()
    save_file(batch, str(tmp_path / "batch.safetensors"))
    ref = hf_forward_backward(model, batch)

    out, exp_dir = tmp_path / "out.safetensors", tmp_path / "exported"
    run([tool("tests/hf_driver"), "--hf", hf_dir, "--batch", tmp_path / "batch.safetensors",
         "--out", out, "--export", exp_dir])
    got = load_file(str(out))
    check(family, got, ref)
    check_imported_config(family, hf_dir, tmp_path)

    # Round trip HF -> normlab -> HF: the same tensors, bit for bit, and a config transformers
    # loads into the same model.
    orig, back = load_file(str(hf_dir / "model.safetensors")), load_file(str(exp_dir / "model.safetensors"))
    if cfg.tie_word_embeddings:
        orig.pop("lm_head.weight", None)
    assert sorted(orig) == sorted(back)
    for n in orig:
        assert torch.equal(orig[n].float(), back[n]), f"{n} changed in the round trip"
    reloaded = AutoModelForCausalLM.from_pretrained(exp_dir, attn_implementation="eager").eval()
    assert type(reloaded) is type(model)
    with torch.no_grad():
        torch.testing.assert_close(reloaded(input_ids=batch["idx"]).logits, ref["logits"],
                                   rtol=1e-6, atol=1e-6)


def check_imported_config(family, hf_dir, tmp_path):
    """`normlab import` writes the options EXPECT lists into RUN_DIR/config.toml."""
    import tomllib
    if family not in EXPECT:
        return
    run_dir = tmp_path / "imported"
    run([tool("normlab"), "import", "--from", "hf", hf_dir, "--out", run_dir])
    model = tomllib.loads((run_dir / "config.toml").read_text())["model"]
    for key, want in EXPECT[family].items():
        assert model.get(key, {"n_kv_head": 0, "head_dim": 0, "attn_qkv_bias": False,
                               "attn_out_bias": False, "mlp_bias": False}.get(key)) == want, (
            f"[{family}] model.{key} = {model.get(key)!r}, want {want!r}")


# normlab-native configs that map exactly onto each family (trained a few steps so that norm gains
# move away from their initial values).
GQA_SETS = ["model.n_head=8", "model.n_kv_head=2", "model.head_dim=6"]
NATIVE = {
    "gpt2": ["model.placement=pre", "model.norm=layernorm", "model.norm_bias=true", "model.bias=true",
             "model.pos=learned", "model.mlp=gelu_tanh", "model.tie_embeddings=true"],
    "llama": ["model.placement=pre", "model.norm=rmsnorm", "model.mlp=swiglu", "model.pos=rope",
              "model.rope_theta=500", "model.tie_embeddings=false", *GQA_SETS,
              "model.rope_scaling=llama3", "model.rope_factor=4.0", "model.rope_high_freq_factor=8.0",
              "model.rope_original_seq_len=32", "model.mlp_bias=true"],
    "mistral": ["model.placement=pre", "model.norm=rmsnorm", "model.mlp=swiglu", *GQA_SETS,
                "model.layer_pattern=sliding", f"model.sliding_window={W}"],
    "qwen2": ["model.placement=pre", "model.norm=rmsnorm", "model.mlp=swiglu", "model.n_head=8",
              "model.n_kv_head=2", "model.attn_qkv_bias=true", "model.layer_pattern=global,sliding",
              f"model.sliding_window={W}", "model.rope_scaling=linear", "model.rope_factor=2.0"],
    "qwen3": ["model.placement=pre", "model.norm=rmsnorm", "model.mlp=swiglu", "model.n_head=4",
              "model.n_kv_head=1", "model.head_dim=6", "model.qk_norm=rmsnorm",
              "model.qk_norm_scope=head", "model.qk_norm_position=pre_rope",
              "model.layer_pattern=every:2", f"model.sliding_window={W}",
              "model.attn_qkv_bias=true", "model.attn_out_bias=true"],
    "gemma2": ["model.placement=peri", "model.norm=rmsnorm", "model.mlp=geglu",
               "model.norm_gain_offset=1.0", f"model.embed_scale={C ** 0.5!r}",
               f"model.attn_scale={12 ** -0.5!r}", "model.attn_softcap=2.0",
               "model.final_softcap=5.0", *GQA_SETS, "model.layer_pattern=every:2",
               f"model.sliding_window={W}"],
    "gemma3_text": ["model.placement=peri", "model.norm=rmsnorm", "model.mlp=geglu",
                    "model.norm_gain_offset=1.0", f"model.embed_scale={C ** 0.5!r}",
                    "model.qk_norm=rmsnorm", "model.qk_norm_scope=head",
                    "model.qk_norm_position=pre_rope", "model.final_softcap=4.0",
                    "model.tie_embeddings=false", "model.n_kv_head=1", "model.head_dim=6",
                    "model.layer_pattern=sliding,global", f"model.sliding_window={W}",
                    "model.rope_theta=100000", "model.rope_local_theta=1000",
                    "model.rope_scaling=linear", "model.rope_factor=3.0"],
    "olmo2": ["model.placement=reordered", "model.norm=rmsnorm", "model.mlp=swiglu",
              "model.qk_norm=rmsnorm", "model.qk_norm_scope=full", "model.qk_norm_position=pre_rope",
              *GQA_SETS, "model.attn_qkv_bias=true", "model.attn_out_bias=true"],
}
BASE = ["model.vocab_size=256", f"model.d_model={C}", f"model.n_head={H}", f"model.d_ff={F}",
        f"model.n_layer={L}", f"model.seq_len={MAXPOS}", "train.batch_size=2", "train.eval_interval=0",
        "train.log_interval=0", "train.threads=1", "optim.warmup_steps=0", "optim.lr=0.03"]


def train_run(run_dir, sets, steps):
    cmd = [tool("normlab"), "train", "--out", run_dir]
    for s in BASE + [f"train.steps={steps}"] + sets:
        cmd += ["--set", s]
    run(cmd)


@pytest.mark.parametrize("family", FAMILIES)
def test_export_loads_in_transformers(family, tmp_path):
    run_dir, hf_dir = tmp_path / "run", tmp_path / "hf"
    train_run(run_dir, NATIVE[family], steps=3)
    proc = run([tool("normlab"), "export", "--to", "hf", run_dir, "--out", hf_dir])
    assert f"as {family} " in proc.stdout, proc.stdout
    g = torch.Generator().manual_seed(2)
    batch = {"idx": torch.randint(0, 256, (B, T), generator=g),
             "targets": torch.randint(0, 256, (B, T), generator=g)}
    save_file(batch, str(tmp_path / "batch.safetensors"))
    out = tmp_path / "out.safetensors"
    run([tool("tests/hf_driver"), "--checkpoint", run_dir, "--batch", tmp_path / "batch.safetensors",
         "--out", out])
    model = AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    assert model.config.model_type == family
    check(f"export:{family}", load_file(str(out)), hf_forward_backward(model, batch))


REFUSED = {
    "post": (["model.placement=post"], "model.placement = post"),
    "deepnorm": (["model.placement=deepnorm"], "model.placement = deepnorm"),
    "mix": (["model.placement=mix"], "model.placement = mix"),
    "qk_layernorm": (NATIVE["gemma3_text"] + ["model.qk_norm=layernorm"], "model.qk_norm = layernorm"),
    "gemma3_attn_cap": (NATIVE["gemma3_text"] + ["model.attn_softcap=3.0"], "model.attn_softcap = 3"),
    "olmo2_qk_head": (NATIVE["olmo2"] + ["model.qk_norm_scope=head"], "model.qk_norm_scope = head"),
    "llama_learned": (NATIVE["llama"][:5] + ["model.pos=learned"], "model.pos = learned"),
    "mistral_every2": (NATIVE["mistral"] + ["model.layer_pattern=every:2"],
                       "mistral applies its window to every layer or to none"),
    "gemma2_local_base": (NATIVE["gemma2"] + ["model.rope_local_theta=100"],
                          "model.rope_local_theta = 100: gemma2 has one RoPE for every layer"),
    "qwen2_mlp_bias": (NATIVE["qwen2"] + ["model.mlp_bias=true"], "qwen2 has biases on q, k and v only"),
    "olmo2_sliding": (NATIVE["olmo2"] + ["model.layer_pattern=sliding", f"model.sliding_window={W}"],
                      "olmo2 has no sliding-window attention"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_export_refuses_unmappable(case, tmp_path):
    sets, message = REFUSED[case]
    run_dir, hf_dir = tmp_path / "run", tmp_path / "hf"
    train_run(run_dir, sets, steps=1)
    proc = run([tool("normlab"), "export", "--to", "hf", run_dir, "--out", hf_dir], expect_ok=False)
    assert proc.returncode != 0, proc.stdout
    assert message in proc.stderr, proc.stderr
    assert not (hf_dir / "model.safetensors").exists()


def write_config(path, cfg_dict):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(cfg_dict))


def _llama(**kw):
    return LlamaConfig(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L,
                       num_attention_heads=H, **kw)


IMPORT_REFUSED = {
    "rope_yarn": (lambda: _llama(rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4,
                                                  "original_max_position_embeddings": 8}),
                  "rope_parameters.rope_type = \"yarn\""),
    "partial_rotary": (lambda: {**_llama().to_dict(), "rope_parameters": {
        "rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.5}},
                       "partial_rotary_factor = 0.5"),
    "gqa_not_dividing": (lambda: {**_llama().to_dict(), "num_key_value_heads": 3},
                         "num_key_value_heads = 3: must divide num_attention_heads = 4"),
    # Gemma 3 sliding layers whose RoPE is scaled, unlike the global one: normlab's local RoPE is
    # unscaled.
    "gemma3_scaled_local": (lambda: Gemma3TextConfig(
        vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
        num_key_value_heads=H, head_dim=C // H, layer_types=["sliding_attention", "full_attention"],
        rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                         "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}),
        "rope_parameters.sliding_attention.rope_type = \"linear\""),
    # Sliding layers listed but no window: transformers cannot run it either.
    "qwen2_window_off": (lambda: {**Qwen2Config(vocab_size=V, hidden_size=C, intermediate_size=F,
                                                num_hidden_layers=L, num_attention_heads=H).to_dict(),
                                  "layer_types": ["full_attention", "sliding_attention"]},
                         "sliding_window = null: null, but layer_types has sliding_attention layers"),
    "family": (lambda: {"model_type": "phi3"}, "model_type = \"phi3\""),
}


@pytest.mark.parametrize("case", list(IMPORT_REFUSED))
def test_import_refuses_unmappable(case, tmp_path):
    make, message = IMPORT_REFUSED[case]
    cfg = make()
    write_config(tmp_path / "hf", cfg if isinstance(cfg, dict) else cfg.to_dict())
    proc = run([tool("normlab"), "import", "--from", "hf", tmp_path / "hf", "--out", tmp_path / "run"],
               expect_ok=False)
    assert proc.returncode != 0, proc.stdout
    assert message in proc.stderr, proc.stderr


def legacy_config(family, cfg_dict):
    """The transformers 4 spelling of a config (as most Hub checkpoints still are): rope_theta and
    rope_scaling at the top level (Gemma 3: rope_local_base_freq, sliding_window_pattern, no
    layer_types)."""
    d = dict(cfg_dict)
    rp = d.pop("rope_parameters")
    if family == "gemma3_text":
        full, local = rp["full_attention"], rp["sliding_attention"]
        d["rope_theta"], d["rope_local_base_freq"] = full["rope_theta"], local["rope_theta"]
        d["rope_scaling"] = {k: v for k, v in full.items() if k != "rope_theta"}
        d.pop("layer_types")
        d["sliding_window_pattern"] = 6
    else:
        d["rope_theta"] = rp["rope_theta"]
        d["rope_scaling"] = {k: v for k, v in rp.items() if k != "rope_theta"}
    return d


@pytest.mark.parametrize("family", ["llama", "gemma3_text"])
def test_import_legacy_rope_keys(family, tmp_path):
    """Llama 3.1 and Gemma 3 as their Hub config.json files spell RoPE scaling and the local base:
    transformers converts them on loading, normlab reads them to the same model."""
    model = make_hf_model(family, hf_configs()[family])
    hf_dir = tmp_path / "hf"
    model.save_pretrained(hf_dir, safe_serialization=True)
    cfg = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps(legacy_config(family, cfg)))
    reloaded = AutoModelForCausalLM.from_pretrained(hf_dir, attn_implementation="eager").eval()
    batch = make_batch()
    save_file(batch, str(tmp_path / "batch.safetensors"))
    run([tool("tests/hf_driver"), "--hf", hf_dir, "--batch", tmp_path / "batch.safetensors",
         "--out", tmp_path / "out.safetensors"])
    check(f"legacy:{family}", load_file(str(tmp_path / "out.safetensors")),
          hf_forward_backward(reloaded, batch))
    check_imported_config(family, hf_dir, tmp_path)


# Greedy continuation with normlab's KV cache against transformers' generate (its own cache):
# prompts of 7 and 9 tokens, longer than the window W = 3, plus 7 new tokens stay within the
# imported context (MAXPOS = 16).
GEN_PROMPTS = [[5, 17, 42, 99, 3, 250, 7], [11, 11, 300, 2, 64, 128, 9, 1, 77]]
GEN_NEW = 7


@pytest.mark.parametrize("family", FAMILIES)
def test_generate_matches_transformers(family, tmp_path):
    model = make_hf_model(family, hf_configs()[family], seed=4)
    hf_dir, run_dir = tmp_path / "hf", tmp_path / "run"
    model.save_pretrained(hf_dir, safe_serialization=True)
    run([tool("normlab"), "import", "--from", "hf", hf_dir, "--out", run_dir])
    min_gap = float("inf")
    for prompt in GEN_PROMPTS:
        assert len(prompt) > W and len(prompt) + GEN_NEW <= MAXPOS
        proc = run([tool("normlab"), "generate", "--checkpoint", run_dir, "--prompt-ids",
                    ",".join(map(str, prompt)), "--max-new-tokens", str(GEN_NEW), "--temperature", "0"])
        got = [int(t) for t in proc.stdout.split()]
        with torch.no_grad():
            out = model.generate(torch.tensor([prompt]), max_new_tokens=GEN_NEW, min_new_tokens=GEN_NEW,
                                 do_sample=False, pad_token_id=None, eos_token_id=None,
                                 output_scores=True, return_dict_in_generate=True)
        want = out.sequences[0].tolist()
        # The margin of each greedy choice in HF's logits: a flip below float32 noise would be no bug.
        gaps = [float(v[0] - v[1]) for v in (sc[0].topk(2).values for sc in out.scores)]
        min_gap = min(min_gap, *gaps)
        assert got == want, (f"[{family}] prompt {prompt}: normlab {got[len(prompt):]} vs "
                             f"transformers {want[len(prompt):]} (top-2 logit gaps {gaps})")
    Summary.rows.append({"suite": "hf_interop", "case": f"generate:{family}", "group": "tokens",
                         "min_top2_gap": min_gap, "n_tokens": GEN_NEW * len(GEN_PROMPTS),
                         "time": time.time()})
    print(f"  [generate:{family}] {GEN_NEW * len(GEN_PROMPTS)} tokens equal; smallest top-2 logit gap {min_gap:.3e}")


def test_imported_run_dir_works_with_eval_generate_resume(tmp_path):
    # Vocabulary 256: the embedded corpus and `generate`'s tokenizer are byte-level.
    family = "llama"
    model = make_hf_model(family, hf_configs(V=256)[family])
    hf_dir, run_dir = tmp_path / "hf", tmp_path / "run"
    model.save_pretrained(hf_dir, safe_serialization=True)
    proc = run([tool("normlab"), "import", "--from", "hf", hf_dir, "--out", run_dir,
                "--set", "train.steps=1", "--set", "train.batch_size=2", "--set", "train.eval_interval=0",
                "--set", "train.threads=1"])
    assert "imported llama" in proc.stdout
    # The checkpoint holds HF's weights: its logits are HF's.
    batch = make_batch(vocab=256)
    save_file(batch, str(tmp_path / "batch.safetensors"))
    run([tool("tests/hf_driver"), "--checkpoint", run_dir, "--batch", tmp_path / "batch.safetensors",
         "--out", tmp_path / "out.safetensors"])
    got = load_file(str(tmp_path / "out.safetensors"))
    with torch.no_grad():
        torch.testing.assert_close(got["logits"], model(input_ids=batch["idx"]).logits,
                                   rtol=1e-4, atol=1e-4)
    run([tool("normlab"), "eval", "--checkpoint", run_dir, "--batches", "1"])
    run([tool("normlab"), "generate", "--checkpoint", run_dir, "--prompt", "ab",
         "--max-new-tokens", "3", "--temperature", "0"])
    run([tool("normlab"), "train", "--resume", run_dir])
    assert (run_dir / "checkpoints" / "step_00000001" / "model.safetensors").exists()


def test_import_gemma3_multimodal_language_model(tmp_path):
    """model_type gemma3 (Gemma3ForConditionalGeneration): text_config and the language model's
    weights are imported, the vision tower skipped; text-only logits match."""
    from transformers import Gemma3Config, Gemma3ForConditionalGeneration, SiglipVisionConfig
    text = hf_configs()["gemma3_text"]
    vision = SiglipVisionConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                num_attention_heads=2, image_size=28, patch_size=14)
    cfg = Gemma3Config(text_config=text.to_dict(), vision_config=vision.to_dict(),
                       mm_tokens_per_image=1, image_token_index=V - 3, boi_token_index=V - 2,
                       eoi_token_index=V - 1, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = Gemma3ForConditionalGeneration(cfg).float()
    randomise(model, "gemma3", 3)
    model.eval()
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    batch = make_batch(vocab=V - 3)  # no image tokens
    save_file(batch, str(tmp_path / "batch.safetensors"))
    proc = run([tool("tests/hf_driver"), "--hf", tmp_path / "hf", "--batch",
                tmp_path / "batch.safetensors", "--out", tmp_path / "out.safetensors"])
    assert "vision tower" in proc.stderr
    got = load_file(str(tmp_path / "out.safetensors"))
    with torch.no_grad():
        logits = model(input_ids=batch["idx"]).logits
    errs = rel_errors({"logits": got["logits"]}, {"logits": logits})
    Summary.record("gemma3(multimodal)", errs)
    assert errs["logits"] <= REL_TOL, errs
