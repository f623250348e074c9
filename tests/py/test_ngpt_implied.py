"""nGPT's implied settings (issue 50): model.mlp defaults to swiglu under placement = ngpt (as
weight decay and warmup default to 0), an explicit other MLP is still refused, and a model.norm
that nGPT ignores draws a warning."""
import tomllib

from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.eval_interval=0", "--set", "train.checkpoint_interval=0",
        "--set", "train.threads=1", "--set", "train.steps=1"]


def test_ngpt_implies_swiglu_when_unset():
    p = normlab("train", "--dump-config", *TINY, "--set", "model.placement=ngpt", check=0)
    cfg = tomllib.loads(p.stdout)
    assert cfg["model"]["mlp"] == "swiglu"
    assert cfg["optim"]["weight_decay"] == 0 and cfg["optim"]["warmup_steps"] == 0
    # set explicitly, another MLP is refused by name; without nGPT the default stays gelu
    p = normlab("train", "--dump-config", *TINY, "--set", "model.placement=ngpt",
                "--set", "model.mlp=gelu", check=2)
    assert "model.mlp" in p.stderr and "swiglu" in p.stderr, p.stderr
    p = normlab("train", "--dump-config", *TINY, check=0)
    assert tomllib.loads(p.stdout)["model"]["mlp"] == "gelu"


def test_a_norm_ngpt_ignores_is_warned_about(tmp_path):
    p = normlab("train", "--out", tmp_path / "r", *TINY, "--set", "model.placement=ngpt",
                "--set", "model.norm=rmsnorm", check=0)
    assert "model.norm = rmsnorm has no effect with model.placement = ngpt" in p.stderr, p.stderr
    p = normlab("train", "--out", tmp_path / "s", *TINY, "--set", "model.placement=ngpt", check=0)
    assert "model.norm" not in p.stderr, p.stderr
