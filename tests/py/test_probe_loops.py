"""normlab.torch.Probe in the plain loops people write: probe.step() called before
optimizer.step() (held, recorded with that step, one warning), padding masks (real tokens only,
checked against Hugging Face's own eager attention weights and hidden states), activation
checkpointing (hooks firing twice counted once), gradient accumulation counted into config.toml,
and config.toml's source.unknown / comments naming what the probe could not infer."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab
import normlab.torch as ntorch
from probe_fixtures import V, hf_model, markov_batches

SKIP = ("time_s", "tokens_per_s", "wall_s")


def lines_of(out):
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def loop(out, early: bool, steps=4, accum=1, checkpoint=False, **probe_kw):
    """A Llama loop with AdamW and clipping; `early`: probe.step(loss) right after the forward,
    before backward and optimizer.step() (inside a compute_loss, say)."""
    model = hf_model("llama")
    if checkpoint:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    idx, tgt = markov_batches(steps * accum)
    with ntorch.Probe(model, opt, out=out, interval=2, **probe_kw) as probe:
        for s in range(steps):
            for a in range(accum):
                i = s * accum + a
                logits = model(input_ids=idx[i]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt[i].reshape(-1))
                if early:
                    probe.step(loss)
                (loss / accum).backward()
            opt.step()
            opt.zero_grad()
            if not early:
                probe.step(loss)
    return lines_of(out)


def strip(lines):
    return [{k: v for k, v in x.items() if k not in SKIP} for x in lines]


def test_step_before_optimizer_step_is_held_and_warned_once(tmp_path):
    right = loop(tmp_path / "right", early=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        early = loop(tmp_path / "early", early=True)
    said = [str(w.message) for w in caught if "normlab.torch.Probe: step()" in str(w.message)]
    assert len(said) == 1 and "after optimizer.step()" in said[0]
    # the same records: nothing shifted by a step, no phantom non-finite step
    assert strip(early) == strip(right)
    assert not any(x.get("nonfinite") for x in early)


def test_activation_checkpointing_counts_once(tmp_path):
    """Recomputed forwards fire the hooks again in the backward pass: the statistics and the
    token count equal those of the loop without checkpointing."""
    plain = loop(tmp_path / "plain", early=False, steps=2)
    ckpt = loop(tmp_path / "ckpt", early=False, steps=2, checkpoint=True)
    a, b = strip(plain), strip(ckpt)
    assert [x["tokens"] for x in b[:2]] == [32, 64]
    for x, y in zip(a, b):
        for k, v in x.items():
            if isinstance(v, float):
                assert y[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k
            elif isinstance(v, list) and v and isinstance(v[0], float):
                assert y[k] == pytest.approx(v, rel=1e-5, abs=1e-7), k


def test_accumulation_counts_micro_batches_into_config(tmp_path):
    lines = loop(tmp_path / "r", early=False, steps=2, accum=3)
    assert [x["tokens"] for x in lines[:2]] == [96, 192]
    cfg = normlab.Config(tmp_path / "r")
    assert cfg["train.grad_accum"] == 3
    text = (tmp_path / "r" / "config.toml").read_text()
    # the clip threshold is not observable in a plain loop: named as not inferred
    unknown = (cfg["source.unknown"] if "source.unknown" in normlab.Config.keys()
               else text.split("# not inferred (normlab defaults written): ")[1].split("\n")[0])
    assert "optim.grad_clip" in unknown and "train.grad_accum" not in unknown
    assert "optim.schedule" not in unknown  # a constant rate, observed on every step
    assert cfg["optim.schedule"] == "constant"


def test_padding_counts_real_tokens_and_measures_them_only(tmp_path):
    """Left padding on one row: tokens, residual stream (RMS, max, channel kurtosis) at the
    embedding and after block 0,
    log Z and the attention entropy over the real tokens only, against HF's own eager attention
    weights and hidden states on the same batch."""
    model = hf_model("llama", attn_implementation="eager", initializer_range=0.3)
    model.config._attn_implementation = "eager"
    idx, _ = markov_batches(1)
    x = idx[0]
    mask = torch.ones_like(x)
    mask[0, :6] = 0
    probe = ntorch.Probe(model, None, out=tmp_path / "r", interval=1)
    out = model(input_ids=x, attention_mask=mask, output_attentions=True,
                output_hidden_states=True)
    out.logits.sum().backward()
    probe.step(torch.tensor(0.0), lr=1.0)
    probe.close()
    line = lines_of(tmp_path / "r")[0]
    real = mask.bool()
    assert line["tokens"] == int(real.sum()) == 26
    for k, h in ((0, out.hidden_states[0]), (2, out.hidden_states[1])):
        h = h.detach().double()[real]  # (real tokens, C)
        assert line["resid_rms"][k] == pytest.approx(h.square().mean().sqrt().item(), rel=1e-5)
        assert line["resid_max"][k] == pytest.approx(h.abs().max().item(), rel=1e-6)
        s2 = h.square().mean(0)  # each channel's mean square over the real tokens
        kurt = (s2.square().mean() / s2.mean().square()).item()
        assert line["resid_kurtosis"][k] == pytest.approx(kurt, rel=1e-5)
    lse = torch.logsumexp(out.logits.detach().double(), -1)[real]
    assert line["log_z_mean"] == pytest.approx(lse.mean().item(), rel=1e-6)
    assert line["log_z_std"] == pytest.approx(lse.std(unbiased=False).item(), rel=1e-4)
    for l, p in enumerate(out.attentions):  # (B, H, T, T); padded keys at P = 0
        p = p.detach().double()
        ent = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)  # (B, H, T)
        rows = real[:, None, :].expand_as(ent)
        assert line["attn_entropy"][l] == pytest.approx(ent[rows].mean().item(), rel=1e-5)
        assert math.isfinite(line["attn_first_mass"][l])


def test_steps_with_no_optimizer_step_are_kept_with_a_null_gradient_norm(tmp_path):
    """probe.step twice with no optimizer step between (an optimizer the probe cannot see step):
    both steps are recorded, the first without a gradient norm (null), neither non-finite."""
    model = hf_model("llama")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = markov_batches(2)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        with ntorch.Probe(model, opt, out=tmp_path / "r", interval=5) as probe:
            for s in range(2):
                logits = model(input_ids=idx[s]).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                         tgt[s].reshape(-1))
                probe.step(loss)
    lines = lines_of(tmp_path / "r")
    assert [x["step"] for x in lines[:-1]] == [1, 2]
    assert all(x["grad_norm"] is None and not x["nonfinite"] for x in lines[:-1])
    assert lines[0]["loss"] == pytest.approx(math.log(V), rel=0.2)


def nonfinite_run(out, where: str) -> list[dict]:
    """Three steps of the GPT fixture (3 blocks, every step probed); at step 2 block 1 goes
    non-finite: its MLP's output (`where` = "forward") or its attention's gradient ("backward")."""
    from probe_fixtures import GPT
    torch.manual_seed(0)
    model = GPT(n_layer=3)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx, tgt = markov_batches(3)
    step = {"n": 0}
    blk = model.transformer.h[1]
    if where == "forward":
        blk.mlp.register_forward_hook(
            lambda m, a, o: o * float("inf") if step["n"] == 1 else o)
    else:
        blk.attn.c_attn.weight.register_hook(
            lambda g: g * float("nan") if step["n"] == 1 else g)
    with ntorch.Probe(model, opt, out=out, interval=1, config={"train.steps": 3}) as probe:
        for s in range(3):
            step["n"] = s
            _, loss = model(idx[s], tgt[s])
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss)
    return lines_of(out)


def test_the_first_nonfinite_sublayer_is_named(tmp_path):
    fwd = nonfinite_run(tmp_path / "fwd", "forward")
    assert "nonfinite_forward" not in fwd[0]
    assert fwd[1]["nonfinite_forward"] == "block 1 MLP (transformer.h.1)", fwd[1]
    assert all(v is not None for v in fwd[1]["resid_rms"][:4]) and fwd[1]["resid_rms"][4] is None
    bwd = nonfinite_run(tmp_path / "bwd", "backward")
    assert bwd[1]["nonfinite_backward"] == "block 1 attention", bwd[1]
    assert "nonfinite_forward" not in bwd[1] and "nonfinite_backward" not in bwd[0]
    assert bwd[1]["grad_norm_attn"][1] is None and bwd[1]["grad_norm_mlp"][2] is not None
    # doctor names it where the run diverged
    from normlab_cli import normlab as normlab_cli
    p = normlab_cli("doctor", tmp_path / "fwd", check=0)
    assert "first non-finite output (forward pass) on probed step 2: block 1 MLP " \
           "(transformer.h.1)" in p.stdout, p.stdout
    # the loss went non-finite: its gradient is non-finite from the (tied) head on
    assert "first non-finite gradient (backward pass, from the output down) on probed step 2: " \
           "outside the blocks (tied head, final norm, embedding)" in p.stdout, p.stdout
