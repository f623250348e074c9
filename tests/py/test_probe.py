"""normlab.torch.Probe on every model family it knows: the run directory it writes is in normlab's
schema (every key documented in docs/metrics.md, the shapes of normlab's diagnostics), its
config.toml is a valid normlab config describing the model, `normlab doctor` and `normlab report`
read it, and models it cannot map are refused with what is missing."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from torch import nn

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab
import normlab.torch as ntorch
from normlab_cli import normlab as normlab_cli
from probe_fixtures import GPT, V, EncoderLM, hf_model, markov_batches

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"

# family -> (normlab placement, model.mlp, model.qk_norm) the probe's config.toml must say
FAMILIES = {
    "llama": ("pre", "swiglu", "none"), "mistral": ("pre", "swiglu", "none"),
    "qwen2": ("pre", "swiglu", "none"), "qwen3": ("pre", "swiglu", "rmsnorm"),
    "gemma2": ("peri", "geglu", "none"), "gemma3": ("peri", "geglu", "rmsnorm"),
    "olmo2": ("reordered", "swiglu", "rmsnorm"), "gpt2": ("pre", "gelu_tanh", "none"),
    "nanogpt": ("pre", "gelu_tanh", "none"), "encoder_pre": ("pre", "gelu", "none"),
    "encoder_post": ("post", "gelu", "none"),
}


def documented_keys() -> set[str]:
    """The keys of docs/metrics.md's metrics.jsonl tables."""
    text = DOCS.read_text()
    section = text[text.index("## metrics.jsonl"):text.index("## metrics.csv")]
    return set(re.findall(r"^\| `([a-z0-9_]+)` \|", section, flags=re.M))


def make(family: str) -> nn.Module:
    if family == "nanogpt":
        torch.manual_seed(0)
        return GPT()
    if family.startswith("encoder"):
        torch.manual_seed(0)
        return EncoderLM(norm_first=family == "encoder_pre")
    return hf_model(family)


def loss_of(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    if isinstance(model, (GPT, EncoderLM)):
        return model(x, y)[1]
    logits = model(input_ids=x).logits
    return nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))


def train(model, out, steps, interval=2, lr=3e-3, per_head=True, **probe_kw):
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.1)
    idx, tgt = markov_batches(steps)
    with ntorch.Probe(model, opt, out=out, interval=interval, per_head=per_head,
                      **probe_kw) as probe:
        for s in range(steps):
            loss = loss_of(model, idx[s], tgt[s])
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss)
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_family_writes_normlab_schema(family, tmp_path):
    model = make(family)
    lines = train(model, tmp_path / "run", steps=3, interval=2)
    steps, end = lines[:-1], lines[-1]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert end["event"] == "end" and end["reason"] == "done" and end["step"] == 3
    assert end["train_loss_steps"] == 3
    keys = documented_keys()
    for line in lines:
        assert set(line) <= keys, f"undocumented keys {set(line) - keys}"
    L, H = 2, 4
    for s in steps:
        assert s["tokens"] == s["step"] * 2 * 16
        assert math.isfinite(s["loss"]) and s["grad_norm"] > 0 and s["lr"] == 3e-3
        if s["step"] == 3:  # between intervals: the step fields only
            assert "resid_rms" not in s and "attn_entropy" not in s
            continue
        assert len(s["resid_rms"]) == len(s["resid_max"]) == 2 * L + 1
        for k in ("attn_max_logit", "attn_entropy", "grad_norm_block", "grad_norm_attn",
                  "grad_norm_mlp"):
            assert len(s[k]) == L and all(v is not None and v >= 0 for v in s[k]), (k, s[k])
        assert len(s["attn_max_logit_head"]) == L and all(len(r) == H for r in
                                                           s["attn_max_logit_head"])
        assert all(max(r) == m for r, m in zip(s["attn_max_logit_head"], s["attn_max_logit"]))
        # entropies of causal rows over 16 keys lie in (0, ln 16]
        assert all(0 < e <= math.log(16) for e in s["attn_entropy"])
        assert all(r > 0 and m >= r for r, m in zip(s["resid_rms"], s["resid_max"]))
        assert s["log_z_max"] >= s["log_z_mean"] > 0 and s["max_logit_raw"] >= s["max_logit"]
        for k in ("grad_norm_block", "grad_norm_attn", "grad_norm_mlp"):
            assert all(math.isfinite(v) for v in s[k])
        # the per-sublayer norms add up to the block's
        for b, a, m in zip(s["grad_norm_block"], s["grad_norm_attn"], s["grad_norm_mlp"]):
            assert b == pytest.approx(math.hypot(a, m), rel=1e-9)
        assert set(s["update_ratio"]) == set(s["grad_norm_group"]) >= {"attention", "mlp",
                                                                          "embedding", "norm"}
        assert set(s["update_rms"]) == set(s["update_ratio"])
        # AdamW's second moment: after its first step v_hat = g^2, so g^2 / v_hat is 1 wherever
        # the gradient is well above eps
        assert set(s["rms_g2v"]) == set(s["grad_norm_group"])
        assert s["rms_g2v_max"] >= max(s["rms_g2v"].values()) * (1 - 1e-6)
        assert s["rms_g2v_max_tensor"] in dict(model.named_parameters())
        if s["step"] == 1:
            assert s["rms_g2v"]["attention"] == pytest.approx(1.0, abs=0.05)
        assert sum(v * v for v in s["grad_norm_group"].values()) == pytest.approx(
            s["grad_norm"] ** 2, rel=1e-5)
    cfg = normlab.Config(tmp_path / "run")
    placement, mlp, qk = FAMILIES[family]
    assert (cfg["model.n_layer"], cfg["model.d_model"], cfg["model.n_head"]) == (2, 32, 4)
    assert (cfg["model.placement"], cfg["model.mlp"], cfg["model.qk_norm"]) == (placement, mlp, qk)
    assert (cfg["model.vocab_size"], cfg["model.seq_len"], cfg["train.batch_size"]) == (V, 16, 2)
    assert (cfg["diag.interval"], cfg["train.steps"], cfg["optim.lr"]) == (2, 3, 3e-3)
    assert (cfg["optim.name"], cfg["optim.weight_decay"]) == ("adamw", 0.1)


def test_doctor_and_report_read_a_probed_run(tmp_path):
    run = tmp_path / "nano"
    train(GPT(), run, steps=12, interval=4)
    p = normlab_cli("doctor", run, "--json", check=0)
    d = json.loads(p.stdout)
    assert d["finished"] and d["steps"] == 12 and d["diagnostics"]["records"] == 4
    assert d["diagnostics"]["per_head"]
    # the data was the PyTorch run's own: the plateau check says it could not read it
    assert any(c["check"] == "unigram plateau" for c in d["not_checked"]), d["not_checked"]
    assert d["config"]["placement"] == "pre"
    text = normlab_cli("doctor", run, check=0).stdout
    assert "12" in text
    normlab_cli("report", run, "--out", tmp_path / "r.html", check=0)
    html = (tmp_path / "r.html").read_text()
    assert "nano" in html and "<svg" in html


def test_hooks_work_only_on_probed_steps(tmp_path):
    """The hooks stay attached while the probe is open (so that torch.compile can trace them)
    and work on probed steps only; close() removes every one."""
    model = hf_model("llama")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    probe = ntorch.Probe(model, opt, out=tmp_path / "r", interval=3)
    attn = model.model.layers[0].self_attn
    idx, tgt = markov_batches(4)
    armed = []
    for s in range(4):
        armed.append(probe.fh.armed)
        assert attn._forward_hooks
        loss = loss_of(model, idx[s], tgt[s])
        loss.backward()
        opt.step()
        opt.zero_grad()
        probe.step(loss)
    probe.close()
    assert armed == [True, False, True, False]  # steps 1 and 3 probed
    assert not attn._forward_hooks and not attn._forward_pre_hooks
    assert not model._forward_pre_hooks and not opt._optimizer_step_pre_hooks


def test_attention_entropy_equals_eager_attention_weights(tmp_path):
    """GPT-2 with eager attention returns its softmax; the probe's entropy and per-head max
    (computed from the hooked c_attn queries and keys) agree with it."""
    model = hf_model("gpt2", attn_implementation="eager")
    model.config._attn_implementation = "eager"
    probe = ntorch.Probe(model, None, out=tmp_path / "r", interval=1, per_head=True)
    idx, _ = markov_batches(1)
    out = model(input_ids=idx[0], output_attentions=True)
    out.logits.sum().backward()
    probe.step(torch.tensor(0.0), lr=0.0)
    probe.close()
    line = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    for l, p in enumerate(out.attentions):  # (B, H, T, T) probabilities
        p = p.detach().double()
        ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1).mean().item()
        assert line["attn_entropy"][l] == pytest.approx(ent, rel=1e-5)
    # log Z from the logits themselves
    lse = torch.logsumexp(out.logits.detach().double(), -1)
    assert line["log_z_mean"] == pytest.approx(lse.mean().item(), rel=1e-6)
    assert line["log_z_std"] == pytest.approx(lse.std(unbiased=False).item(), rel=1e-4)


def test_an_invalid_config_is_refused_before_anything_is_written(tmp_path):
    model = GPT()
    with pytest.raises(normlab.ConfigError, match=r"model\.n_layr.*did you mean 'model\.n_layer'"):
        ntorch.Probe(model, None, out=tmp_path / "r", config={"model.n_layr": 3})
    assert not (tmp_path / "r").exists() and not model._forward_pre_hooks


def test_update_ratios_off_takes_no_weight_copy(tmp_path):
    lines = train(GPT(), tmp_path / "r", steps=2, interval=1, update_ratios=False)
    assert "grad_norm_group" in lines[0] and "rms_g2v" in lines[0]
    assert "update_ratio" not in lines[0] and "update_rms" not in lines[0]


def test_context_manager_marks_an_exception_interrupted(tmp_path):
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = markov_batches(2)
    with pytest.raises(RuntimeError, match="boom"):
        with ntorch.Probe(model, opt, out=tmp_path / "r", config={"train.steps": 10}) as probe:
            loss = model(idx[0], tgt[0])[1]
            loss.backward()
            opt.step()
            probe.step(loss)
            raise RuntimeError("boom")
    end = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[-1])
    assert (end["event"], end["reason"], end["step"]) == ("end", "interrupted", 1)
    assert "boom" in end["detail"]


class Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, 16)
        self.blocks = nn.ModuleList(nn.ModuleDict(dict(
            norm=nn.LayerNorm(16), qk=nn.Linear(16, 32), mix=nn.Linear(16, 16),
            ffn=nn.Linear(16, 16))) for _ in range(2))
        self.out = nn.Linear(16, V)


def test_unmappable_models_are_refused_naming_what_is_missing():
    with pytest.raises(ValueError, match="no module map for Sequential"):
        ntorch.Probe(nn.Sequential(nn.Linear(4, 4)), None, out="/nonexistent/never")
    with pytest.raises(ValueError, match="lacks attn_params, mlp_params, mid, embed"):
        ntorch.Probe(Odd(), None, out="/nonexistent/never",
                     map={"layers": "blocks", "attn": "mix", "q": "qk"})
    with pytest.raises(ValueError, match=r"blocks\.0\.ffn\.weight"):
        ntorch.Probe(Odd(), None, out="/nonexistent/never",
                     map={"layers": "blocks", "attn": "mix", "q": "qk", "mid": "ffn",
                          "attn_params": ["norm.", "qk.", "mix."], "mlp_params": ["mlp."],
                          "embed": ["emb"], "head": "out", "n_head": 2})
    with pytest.raises(ValueError, match=r"layers\[0\]\.attention \(attn\)"):
        ntorch.Probe(Odd(), None, out="/nonexistent/never",
                     map={"layers": "blocks", "attn": "attention", "q": "qk", "mid": "ffn",
                          "attn_params": ["norm.", "qk.", "mix."], "mlp_params": ["ffn."],
                          "embed": ["emb"], "head": "out", "n_head": 2})
    assert not Path("/nonexistent/never").exists()


def test_a_user_map_gives_what_the_family_record_gives(tmp_path):
    """nanoGPT's GPT probed through its family record and through the same names given as a map
    (docs/python.md, 'Models it knows'): the same diagnostics, value for value."""
    user_map = {"layers": "transformer.h", "attn": "attn", "q": "attn.c_attn", "qk_layout": "fused",
                "mid": ("ln_2", "input"), "attn_params": ["ln_1.", "attn."],
                "mlp_params": ["ln_2.", "mlp."], "embed": ["transformer.wte", "transformer.wpe"],
                "final_norm": "transformer.ln_f", "head": "lm_head", "n_head": 4}
    runs = []
    for name, m in (("family", None), ("map", user_map)):
        torch.manual_seed(0)
        lines = train(GPT(), tmp_path / name, steps=3, interval=2, map=m)
        runs.append([{k: v for k, v in x.items() if k not in ("time_s", "tokens_per_s", "wall_s")}
                     for x in lines])
    assert runs[0] == runs[1]
    assert "attn_entropy" in runs[1][0]
    cfg = normlab.Config(tmp_path / "map")
    assert (cfg["model.n_head"], cfg["model.placement"]) == (4, "pre")


@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3",
                                    "olmo2", "gpt2"])
def test_attention_entropy_equals_each_familys_eager_softmax(family, tmp_path):
    """Every Hugging Face family with eager attention returns its softmax: the probe's entropy,
    computed from the hooked queries and keys (q/k norms, RoPE, scale, sliding window of 4 keys
    where the family has one, Gemma 2's attention cap of 1.5), equals the entropy of HF's own
    attention weights, layer by layer; weights drawn with std 0.3 so that attention is far from
    uniform."""
    over = {"initializer_range": 0.3}
    if family in ("mistral", "gemma2", "gemma3"):
        over["sliding_window"] = 4
    if family == "gemma2":
        over["attn_logit_softcapping"] = 1.5
    if family == "gpt2":
        over = {"initializer_range": 0.3}
    model = hf_model(family, attn_implementation="eager", **over)
    model.config._attn_implementation = "eager"
    probe = ntorch.Probe(model, None, out=tmp_path / "r", interval=1)
    idx, _ = markov_batches(1)
    out = model(input_ids=idx[0], output_attentions=True)
    out.logits.sum().backward()
    probe.step(torch.tensor(0.0), lr=1.0)
    probe.close()
    line = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    uniform = sum(math.log(i + 1) for i in range(16)) / 16
    for l, p in enumerate(out.attentions):  # (B, H, T, T)
        p = p.detach().double()
        ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1).mean().item()
        assert line["attn_entropy"][l] == pytest.approx(ent, rel=1e-5), (l, ent)
        assert ent < uniform - 0.05  # not the uniform rows of an untrained model


def test_import_normlab_does_not_import_torch():
    import subprocess
    import sys

    code = ("import sys; sys.path.insert(0, sys.argv[1]); import normlab; "
            "assert 'torch' not in sys.modules, 'import normlab imported torch'; "
            "import normlab.torch; assert 'torch' in sys.modules")
    p = subprocess.run([sys.executable, "-c", code, str(normlab_py.PKG)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("give_norm", [False, True])
def test_gradients_are_read_every_step_only_without_grad_norm(give_norm, tmp_path):
    """With grad_norm= from the loop, unprobed steps do not read the gradients at all."""
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    probe = ntorch.Probe(model, opt, out=tmp_path / "r", interval=3)
    reads = []
    inner = probe._grad_norms
    probe._grad_norms = lambda: (reads.append(probe.step_count + 1), inner())[1]
    idx, tgt = markov_batches(5)
    for s in range(5):
        loss = model(idx[s], tgt[s])[1]
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
        opt.step()
        opt.zero_grad()
        probe.step(loss, grad_norm=norm if give_norm else None)
    probe.close()
    # probed steps (1 and 3) only, when the loop gives the norm
    assert reads == ([1, 3] if give_norm else [1, 2, 3, 4, 5])
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert all(x["grad_norm"] > 0 for x in lines[:-1])


def test_multihead_attention_entropy_equals_its_own_weights(tmp_path):
    """nn.TransformerEncoder: the probe's entropy of layer 0 (queries and keys from the
    MultiheadAttention's input and in_proj_weight) equals that of the weights the module returns
    when asked for them."""
    torch.manual_seed(0)
    model = EncoderLM(norm_first=True)
    for p in model.parameters():  # attention far from uniform
        nn.init.normal_(p, std=0.3)
    probe = ntorch.Probe(model, None, out=tmp_path / "r", interval=1)
    idx, tgt = markov_batches(1)
    _, loss = model(idx[0], tgt[0])
    loss.backward()
    probe.step(loss, lr=1.0)
    probe.close()
    line = json.loads((tmp_path / "r" / "metrics.jsonl").read_text().splitlines()[0])
    layer = model.encoder.layers[0]
    with torch.no_grad():
        h = layer.norm1(model.emb(idx[0]))
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[-1])
        _, w = layer.self_attn(h, h, h, attn_mask=mask, need_weights=True,
                               average_attn_weights=False)
    p = w.double()
    ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1).mean().item()
    assert line["attn_entropy"][0] == pytest.approx(ent, rel=1e-5)
    assert ent < sum(math.log(i + 1) for i in range(16)) / 16 - 0.05


def test_bf16_autocast_and_gradient_accumulation(tmp_path):
    """A loop under torch.autocast(bfloat16) with two micro-batches per optimizer step: the probe
    counts both micro-batches' tokens, takes the forward statistics of the last, and measures in
    float32 whatever dtype the hooked tensors have."""
    model = hf_model("llama", initializer_range=0.3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = markov_batches(4)
    log_z = []  # mean log Z of each micro-batch's own logits
    with ntorch.Probe(model, opt, out=tmp_path / "r", interval=1) as probe:
        for s in range(2):
            for micro in (2 * s, 2 * s + 1):
                with torch.autocast("cpu", dtype=torch.bfloat16):
                    logits = model(input_ids=idx[micro]).logits
                    loss = nn.functional.cross_entropy(logits.float().reshape(-1, V),
                                                       tgt[micro].reshape(-1)) / 2
                log_z.append(torch.logsumexp(logits.detach().float(), -1).mean().item())
                loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss * 2)
    lines = [json.loads(x) for x in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    assert [x["tokens"] for x in lines[:2]] == [64, 128]  # 2 micro-batches of 2 x 16
    for x in lines[:2]:
        for k in ("resid_rms", "attn_entropy", "attn_max_logit", "grad_norm_block"):
            assert all(v is not None and math.isfinite(v) and v > 0 for v in x[k]), (k, x[k])
        assert x["update_ratio"]["attention"] > 0
    assert abs(log_z[1] - log_z[0]) > 1e-3 and abs(log_z[3] - log_z[2]) > 1e-3
    assert [lines[0]["log_z_mean"], lines[1]["log_z_mean"]] == pytest.approx(
        [log_z[1], log_z[3]], rel=1e-6)  # each step's last micro-batch
