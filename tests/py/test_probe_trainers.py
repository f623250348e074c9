"""normlab.torch.TrainerCallback and LightningCallback. The Trainer example of docs/python.md
(examples/probe_trainer.py: tiny Llama, accumulation 2, clipping at 1.0, linear schedule with
warmup, an evaluation every 20 steps) runs in this process; the callback's records equal what
Trainer itself logs (loss, the gradient norm before clipping, learning rate, eval loss), its
per-group gradient norms are the unclipped ones, its config.toml says what TrainingArguments say,
and step 1's forward statistics equal an eager probe's on the same initial weights and last
micro-batch. The Lightning run equals the same loop written by hand."""
from __future__ import annotations

import json
import math
import runpy
import sys
from pathlib import Path

import pytest
import torch

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab
import normlab.torch as ntorch
from probe_fixtures import V, hf_model, markov_batches

ROOT = Path(__file__).resolve().parents[2]
FORWARD = ("resid_rms", "resid_max", "attn_max_logit", "attn_entropy", "attn_first_mass",
           "log_z_mean", "log_z_std", "log_z_max", "max_logit", "max_logit_raw")


def lines_of(run):
    return [json.loads(x) for x in (Path(run) / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("trainer") / "run"
    argv = sys.argv
    sys.argv = ["probe_trainer.py", str(out)]
    try:
        g = runpy.run_path(str(ROOT / "examples" / "probe_trainer.py"), run_name="__main__")
    finally:
        sys.argv = argv
    return out, g


def test_trainer_records_what_trainer_logs(trainer_run):
    out, g = trainer_run
    lines = lines_of(out)
    steps = [x for x in lines if "event" not in x]
    assert [x["step"] for x in steps] == list(range(1, 41)) and lines[-1]["event"] == "end"
    logs = {h["step"]: h for h in g["trainer"].state.log_history if "loss" in h}
    evals = {h["step"]: h for h in g["trainer"].state.log_history if "eval_loss" in h}
    clipped = 0
    for x in steps:
        h = logs[x["step"]]
        assert x["loss"] == pytest.approx(h["loss"], rel=1e-5)
        assert x["grad_norm"] == pytest.approx(float(h["grad_norm"]), rel=1e-5)
        assert x["lr"] == pytest.approx(h["learning_rate"], rel=1e-9, abs=1e-12)
        assert x["tokens"] == 128 * x["step"]  # 2 micro-batches of 4 x 16
        clipped += x["grad_norm"] > 1.0
        if "grad_norm_group" in x:  # before clipping: they add up to the unclipped norm
            total = math.sqrt(sum(v * v for v in x["grad_norm_group"].values()))
            assert total == pytest.approx(x["grad_norm"], rel=1e-5)
    assert clipped >= 10  # the clip was active: post-clip norms would have failed above
    assert [x["step"] for x in steps if "attn_entropy" in x] == [1, 10, 20, 30, 40]
    for s in (20, 40):
        assert steps[s - 1]["val_loss"] == pytest.approx(evals[s]["eval_loss"], rel=1e-6)
    cfg = normlab.Config(out)
    assert (cfg["optim.grad_clip"], cfg["train.grad_accum"], cfg["optim.schedule"]) == (
        1.0, 2, "linear")
    assert (cfg["optim.warmup_steps"], cfg["optim.weight_decay"], cfg["train.steps"]) == (
        4, 0.1, 40)
    assert cfg["source.trainer"] == "transformers.Trainer" and cfg["source.kind"] == "torch"
    assert "optim.grad_clip" not in cfg["source.unknown"]


def test_trainer_forward_statistics_equal_an_eager_probe(trainer_run, tmp_path):
    out, g = trainer_run
    step1 = lines_of(out)[0]
    torch.manual_seed(0)  # the example's initial weights
    model = type(g["model"])(g["cfg"])
    batch = torch.stack([g["trainer"].train_dataset[i]["input_ids"] for i in range(4, 8)])
    probe = ntorch.Probe(model, None, out=tmp_path / "eager", interval=1)
    model(input_ids=batch).logits.sum().backward()  # step 1's last micro-batch
    probe.step(torch.tensor(0.0), lr=1.0)
    probe.close()
    ref = lines_of(tmp_path / "eager")[0]
    for k in FORWARD:
        assert step1[k] == pytest.approx(ref[k], rel=1e-5), k


def test_lightning_equals_the_same_loop_by_hand(tmp_path):
    L = pytest.importorskip("lightning.pytorch")
    steps, accum = 6, 2
    idx, tgt = markov_batches(steps * accum)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = hf_model("llama")

        def training_step(self, batch, i):
            x, y = batch
            logits = self.model(input_ids=x).logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, V), y.reshape(-1))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-3, weight_decay=0.1)

    data = torch.utils.data.DataLoader(list(zip(idx, tgt)), batch_size=None)
    trainer = L.Trainer(max_steps=steps, accumulate_grad_batches=accum, gradient_clip_val=0.5,
                        enable_checkpointing=False, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, accelerator="cpu", devices=1,
                        callbacks=[ntorch.LightningCallback(out=tmp_path / "pl", interval=2)])
    trainer.fit(Module(), data)
    got = lines_of(tmp_path / "pl")

    model = hf_model("llama")  # the same loop, by hand
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    # gradients read before clipping, as Lightning's on_before_optimizer_step
    with ntorch.Probe(model, opt, out=tmp_path / "hand", interval=2, grads="caller") as probe:
        for s in range(steps):
            losses = []
            for a in range(accum):
                i = s * accum + a
                loss = torch.nn.functional.cross_entropy(
                    model(input_ids=idx[i]).logits.reshape(-1, V), tgt[i].reshape(-1))
                (loss / accum).backward()
                losses.append(loss.detach())
            probe.read_grads()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            opt.zero_grad()
            probe.step(torch.stack(losses).mean(), grad_norm=norm)
    ref = lines_of(tmp_path / "hand")
    assert len(got) == len(ref) == steps + 1
    for x, y in zip(got[:-1], ref[:-1]):
        for k, v in y.items():
            if k in ("time_s", "tokens_per_s"):
                continue
            if isinstance(v, float):
                assert x[k] == pytest.approx(v, rel=1e-4, abs=1e-7), (x["step"], k)
            elif isinstance(v, list) and v and isinstance(v[0], float):
                assert x[k] == pytest.approx(v, rel=1e-4, abs=1e-7), (x["step"], k)
            elif isinstance(v, dict):
                assert x[k] == pytest.approx(v, rel=1e-4, abs=1e-7), (x["step"], k)
            else:
                assert x[k] == v, (x["step"], k)
    assert any(x["grad_norm"] > 0.5 for x in ref[:-1])  # the clip was active
    cfg = normlab.Config(tmp_path / "pl")
    assert (cfg["optim.grad_clip"], cfg["train.grad_accum"], cfg["source.trainer"]) == (
        0.5, 2, "lightning")


def test_docs_show_the_trainer_example():
    import re
    text = (ROOT / "docs" / "python.md").read_text()
    m = re.search(r"<!-- probe-trainer -->\n```python\n(.*?)```\n<!-- /probe-trainer -->", text,
                  flags=re.S)
    assert m and m.group(1) == (ROOT / "examples" / "probe_trainer.py").read_text()
    code = [x for x in m.group(1).splitlines() if x.strip()]
    assert len(code) <= 32, f"the example has {len(code)} non-blank lines"


def test_doctor_reads_the_trainer_run_as_documented(trainer_run):
    from normlab_cli import normlab as normlab_cli
    out = normlab_cli("doctor", trainer_run[0], check=0).stdout.splitlines()
    assert out[1] == "source: a PyTorch run (transformers.Trainer)", out
    assert [x for x in out if x.startswith("verdict: ")][0].startswith("verdict: healthy"), out
