"""`normlab report --tensorboard DIR` and `normlab export-metrics --to tensorboard`: the event files
of a normlab run and of a probed PyTorch run, read back with TensorBoard's own reader
(EventAccumulator, which checks every record's CRC), hold every number of every step line at its
step."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from normlab_cli import normlab

# requirements-test.txt installs tensorboard: its absence is a failure, not a skip
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=4", "--set", "train.eval_batches=1",
        "--set", "train.log_interval=1", "--set", "train.threads=1", "--set", "train.steps=8",
        "--set", "diag.interval=4", "--set", "diag.per_head=true"]


def _expected(run: Path) -> dict[str, dict[int, float]]:
    """tag -> {step: value} from metrics.jsonl, flattened as the export names them."""
    out: dict[str, dict[int, float]] = {}

    def put(tag, v, step):
        if isinstance(v, bool):
            out.setdefault(tag, {})[step] = float(v)
        elif isinstance(v, (int, float)):
            out.setdefault(tag, {})[step] = float(v)
        elif isinstance(v, list):
            for i, x in enumerate(v):
                put(f"{tag}/{i}", x, step)
        elif isinstance(v, dict):
            for k, x in v.items():
                put(f"{tag}/{k}", x, step)

    for line in (run / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if "event" in rec:
            continue
        for k, v in rec.items():
            if k not in ("step", "time_s"):
                put(k, v, rec["step"])
    return out


def _check(events_dir: Path, run: Path) -> int:
    files = list(events_dir.glob("events.out.tfevents.*"))
    assert len(files) == 1, files
    acc = EventAccumulator(str(events_dir), size_guidance={"scalars": 0})
    acc.Reload()
    want = _expected(run)
    assert set(acc.Tags()["scalars"]) == set(want)
    for tag, steps in want.items():
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert set(got) == set(steps), tag
        for s, v in steps.items():
            assert got[s] == pytest.approx(v, rel=1e-6, abs=1e-30), (tag, s)
    walls = [e.wall_time for e in acc.Scalars("loss")]
    assert walls == sorted(walls) and walls[-1] - walls[0] < 3600
    return len(want)


def test_normlab_and_probed_runs_read_back_with_tensorboard(tmp_path):
    normlab("train", "--out", tmp_path / "tiny", *TINY, check=0)
    import normlab_py  # noqa: F401  (the build tree's package, for normlab.torch)
    import normlab.torch as ntorch
    from probe_fixtures import GPT, markov_batches

    torch.manual_seed(0)
    model = GPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    idx, tgt = markov_batches(6)
    with ntorch.Probe(model, opt, out=tmp_path / "probed", interval=3, per_head=True) as probe:
        for s in range(6):
            loss = model(idx[s], tgt[s])[1]
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss, val_loss=1.5 if s == 5 else None)
    p = normlab("report", tmp_path / "tiny", tmp_path / "probed", "--tensorboard",
                tmp_path / "tb", check=0)
    assert "wrote TensorBoard event files of 2 runs" in p.stdout
    assert "report.html" not in p.stdout  # no --out: the event files only
    n_tiny = _check(tmp_path / "tb" / "tiny", tmp_path / "tiny")
    n_probed = _check(tmp_path / "tb" / "probed", tmp_path / "probed")
    # per-layer, per-head and per-group fields are there as scalars
    acc = EventAccumulator(str(tmp_path / "tb" / "probed"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"grad_norm_block/1", "attn_max_logit_head/1/3", "update_ratio/attention",
            "resid_rms/4", "spike", "val_loss"} <= tags
    assert n_tiny > 40 and n_probed > 40  # tags, every one checked value by value above
    assert [e.step for e in acc.Scalars("attn_entropy/0")] == [1, 3, 6]


def test_export_metrics_command(tmp_path):
    normlab("train", "--out", tmp_path / "tiny", *TINY, check=0)
    p = normlab("export-metrics", tmp_path / "tiny", "--to", "tensorboard", "--out",
                tmp_path / "tb", check=0)
    assert "1 run" in p.stdout
    _check(tmp_path / "tb" / "tiny", tmp_path / "tiny")
    # a second export replaces the event file instead of adding one beside it
    normlab("export-metrics", tmp_path / "tiny", "--out", tmp_path / "tb", check=0)
    assert len(list((tmp_path / "tb" / "tiny").glob("events.out.tfevents.*"))) == 1
    p = normlab("export-metrics", tmp_path / "tiny", "--to", "wandb", "--out", tmp_path / "x")
    assert p.returncode != 0 and "--to wandb: unknown format (known: tensorboard)" in p.stderr
