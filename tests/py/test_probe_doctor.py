"""`normlab doctor` on PyTorch runs recorded by normlab.torch.Probe and made unstable on purpose
names the same condition as on the corresponding normlab runs (docs/doctor.md's table), and finds
nothing wrong in a healthy probed run. Both sides train byte-level models on the corpus normlab
embeds (data/wordnet_glosses.txt; the probed runs name it as data.path, so doctor's unigram-plateau
check reads the same tokens for both)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab.torch as ntorch
from normlab_cli import normlab
from probe_fixtures import GPT, EncoderLM, hf_model, normlab_lr

CORPUS = Path(__file__).resolve().parents[2] / "data" / "wordnet_glosses.txt"
TINY = {"model.n_layer": 2, "model.d_model": 32, "model.n_head": 2, "model.d_ff": 64,
        "model.seq_len": 32, "train.batch_size": 4, "train.eval_interval": 0,
        "train.log_interval": 1, "train.threads": 1, "diag.per_head": "true"}

# condition -> (normlab --set overrides, the PyTorch model, the kind doctor must name or None)
CASES = {
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


def _batches(steps: int, b: int, t: int, seed: int):
    """Random windows of the corpus's training split (the first 95%, as data.val_fraction)."""
    data = torch.frombuffer(bytearray(CORPUS.read_bytes()), dtype=torch.uint8).long()
    n = int(len(data) * 0.95)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        off = torch.randint(0, n - t - 1, (b,), generator=g)
        w = torch.stack([data[o:o + t + 1] for o in off.tolist()])
        yield w[:, :-1], w[:, 1:]


def _model(kind: str, n_layer: int):
    torch.manual_seed(0)
    if kind == "pre":
        return GPT(n_layer=n_layer, C=32, H=2, vocab=256, seq=32)
    if kind == "post":
        return EncoderLM(norm_first=False, n_layer=n_layer, C=32, H=2, vocab=256)
    return hf_model("gemma3", vocab_size=256, hidden_size=32, intermediate_size=64,
                    num_attention_heads=2, num_key_value_heads=2, head_dim=16,
                    max_position_embeddings=32, sliding_window=32, query_pre_attn_scalar=16,
                    final_logit_softcapping=None)


def _probed(case: str, out: Path) -> None:
    sets, kind, _ = CASES[case]
    steps, lr, warm = sets["train.steps"], sets["optim.lr"], sets["optim.warmup_steps"]
    model = _model(kind, sets.get("model.n_layer", 2))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                            weight_decay=sets.get("optim.weight_decay", 0.1))
    cfg = {"data.path": str(CORPUS), "data.tokenizer": "bytes", "optim.grad_clip": 1.0}
    with ntorch.Probe(model, opt, out=out, interval=sets["diag.interval"], per_head=True,
                      config=cfg) as probe:
        for s, (x, y) in enumerate(_batches(steps, 4, 32, seed=7)):
            for g in opt.param_groups:
                g["lr"] = normlab_lr(s, lr, warm, steps)
            if isinstance(model, (GPT, EncoderLM)):
                loss = model(x, y)[1]
            else:
                logits = model(input_ids=x).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), y.reshape(-1))
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            probe.step(loss, grad_norm=norm)


def _doctor(run: Path) -> dict:
    return json.loads(normlab("doctor", run, "--json", check=0).stdout)


def _problems(d: dict) -> list[str]:
    return [f["kind"] for f in d["findings"] if f["severity"] == "problem"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_doctor_names_the_same_condition_on_probed_and_normlab_runs(case, tmp_path):
    sets, _, kind = CASES[case]
    args = [x for k, v in {**TINY, **sets}.items() for x in ("--set", f"{k}={v}")]
    normlab("train", "--out", tmp_path / "normlab", *args, timeout=600)
    _probed(case, tmp_path / "probed")
    ours, theirs = _doctor(tmp_path / "normlab"), _doctor(tmp_path / "probed")
    print(f"\n{case}: normlab run: {ours['verdict']}\n{case}: probed run:  {theirs['verdict']}")
    assert theirs["unigram_entropy"] == pytest.approx(ours["unigram_entropy"])
    assert theirs["finished"] and theirs["diagnostics"]["records"] > 0
    if kind is None:
        assert ours["healthy"], ours["verdict"]
        assert theirs["healthy"], theirs["verdict"]
    else:
        assert kind in _problems(ours), ours["verdict"]
        assert kind in _problems(theirs), theirs["verdict"]
