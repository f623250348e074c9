"""`compare --seeds N` and `sweep --seeds N` (and normlab.sweep(seeds=)): N runs per cell, seed k
with train.seed + k, seed 0 being the single-seed run itself; summaries of mean ± std (min–max);
a seeded sweep resumes without rerunning its finished seeds; the sensitivity figure's band."""
import hashlib
import json
import pathlib

from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=16", "--set", "model.n_head=2",
        "--set", "model.d_ff=32", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.eval_batches=1", "--set", "train.log_interval=2", "--set", "train.threads=1",
        "--set", "train.steps=6", "--set", "train.eval_interval=6",
        "--set", "train.checkpoint_interval=6", "--set", "optim.warmup_steps=2"]


def losses(run_dir):
    return [json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"loss"' in line and '"event"' not in line]


def weights_digest(run_dir):
    ckpts = sorted((run_dir / "checkpoints").glob("step_*"))
    f = next(p for p in sorted(ckpts[-1].iterdir()) if p.name.startswith("model"))
    return hashlib.sha256(f.read_bytes()).hexdigest()


def test_compare_two_seeds(tmp_path):
    one, two = tmp_path / "one", tmp_path / "two"
    p1 = normlab("compare", *TINY, "--placements", "pre,peri", "--out", one, check=0)
    p2 = normlab("compare", *TINY, "--placements", "pre,peri", "--seeds", "2", "--out", two, check=0)
    # Two runs per placement: seed 0 in the single-seed directory, seed 1 beside it.
    for p in ("pre", "peri"):
        assert (two / p / "metrics.jsonl").exists() and (two / f"{p}_seed1" / "metrics.jsonl").exists()
        assert not (two / f"{p}_seed2").exists()
        # Another seed: another initialisation (step-1 loss) and data order (losses after).
        assert losses(two / p)[0] != losses(two / f"{p}_seed1")[0]
        assert losses(two / p) != losses(two / f"{p}_seed1")
        # Seed 0 is the single-seed run, bitwise: the same losses and the same final weights.
        assert losses(two / p) == losses(one / p)
        assert weights_digest(two / p) == weights_digest(one / p)
    # The table: mean ± std (min–max) per placement, then every run by its seed.
    assert "| pre | 2 | done | 6 |" in p2.stdout and " ± " in p2.stdout and "–" in p2.stdout
    assert "| pre (seed 1338) | done |" in p2.stdout
    md = (two / "summary.md").read_text()
    assert "mean ± sample standard deviation (min–max)" in md
    j = json.loads((two / "summary.json").read_text())
    assert j["seeds"] == 2 and len(j["runs"]) == 4
    assert [r["train_seed"] for r in j["runs"]] == [1337, 1338, 1337, 1338]
    pre = j["placements"][0]
    vals = [r["val_loss"] for r in j["runs"] if r["placement"] == "pre"]
    assert pre["val_loss"]["n"] == 2
    assert abs(pre["val_loss"]["mean"] - sum(vals) / 2) < 1e-12
    assert abs(pre["val_loss"]["std"] - abs(vals[0] - vals[1]) / 2 ** 0.5) < 1e-12
    assert pre["val_loss"]["min"] == min(vals) and pre["val_loss"]["max"] == max(vals)
    # One seed (the default, or --seeds 1): the single-seed summary, no statistics.
    assert " ± " not in p1.stdout
    j1 = json.loads((one / "summary.json").read_text())
    assert isinstance(j1, list) and len(j1) == 2 and "seed" not in j1[0]
    assert ("\n| placement | status | steps | train loss (last 20 steps) | val loss | bits/byte | "
        "tokens/s (run average) | wall s |\n|---|---|---|---|---|---|---|---|\n| pre | done | 6 |"
            in (one / "summary.md").read_text())
    p3 = normlab("compare", *TINY, "--placements", "pre,peri", "--seeds", "1", "--out", one, check=0)
    assert "already finished" in p3.stdout and " ± " not in p3.stdout
    assert json.loads((one / "summary.json").read_text())[0].keys() == j1[0].keys()
    # compare's report draws one loss line per placement (the mean over its seeds) with a band;
    # the single-seed report has none.
    loss = (two / "report_figures" / "loss.svg").read_text()
    assert loss.count('class="band"') == 2 and 'data-label="pre (2 seeds)"' in loss
    assert 'class="band"' not in (one / "report_figures" / "loss.svg").read_text()
    # A rerun with more seeds trains only the new ones.
    p4 = normlab("compare", *TINY, "--placements", "pre", "--seeds", "3", "--out", two, check=0)
    assert p4.stdout.count("already finished") == 2, p4.stdout
    assert (two / "pre_seed2" / "metrics.jsonl").exists()


def test_compare_seeds_must_be_positive(tmp_path):
    p = normlab("compare", *TINY, "--seeds", "0", "--out", tmp_path / "x")
    # The refusal of the value, not an unknown option (which also names --seeds).
    assert p.returncode == 2 and "--seeds: must be a positive integer, not '0'" in p.stderr, p.stderr


def test_sweep_seeds_resumes_and_bands(tmp_path):
    out = tmp_path / "sw"
    args = ["sweep", *TINY, "--grid", "model.placement=pre,peri", "--grid", "optim.lr=1e-3,1e-2",
            "--out", out]
    normlab(*args, check=0)  # one seed first: the single-seed layout
    single = json.loads((out / "sweep.json").read_text())
    assert "seeds" not in single and "±" not in (out / "sensitivity.md").read_text()
    # Two seeds in the same directory: the four finished seed-0 runs are not redone.
    p = normlab(*args, "--seeds", "2", check=0)
    assert p.stdout.count("already finished (") == 4, p.stdout
    j = json.loads((out / "sweep.json").read_text())
    assert j["seeds"] == 2 and len(j["runs"]) == 8
    assert {r["name"] for r in j["runs"] if r["seed"] == 1} == {
        "placement-pre_lr-1e-3_seed1", "placement-pre_lr-1e-2_seed1",
        "placement-peri_lr-1e-3_seed1", "placement-peri_lr-1e-2_seed1"}
    for s in j["sensitivity"]:
        assert s["seeds"] == 2 and len(s["seed_best_lr"]) == 2
        assert all(lo <= m <= hi for lo, m, hi in
                   zip(s["final_loss_min"], s["final_losses"], s["final_loss_max"]))
    runs = {r["name"]: r for r in j["runs"]}
    assert runs["placement-pre_lr-1e-3"]["final_loss"] != runs["placement-pre_lr-1e-3_seed1"]["final_loss"]
    assert "| model.placement=pre | 2 |" in p.stdout and " ± " in p.stdout
    # Resumed again: nothing reruns.
    p2 = normlab(*args, "--seeds", "2", check=0)
    assert p2.stdout.count("already finished (") == 8, p2.stdout
    # The report's sensitivity figure draws the min-max band of each variant.
    normlab("report", out, "--out", tmp_path / "r.html", check=0)
    svg = (tmp_path / "r_figures" / "lr_sensitivity.svg").read_text()
    assert svg.count('class="band"') == 2 and "min\u2013max over seeds" in svg
