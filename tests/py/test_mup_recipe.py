"""docs/mup.md's recipe for carrying a learning rate across width, run as written at tiny sizes
(issue 50): tune the learning rate on the narrow model, widen with d_ff following d_model
(model.d_ff_mult) at that learning rate, and report. The wide run's μP base is the tuned narrow
model (no warning), while the same width sweep without d_ff_mult warns that its base differs."""
import json
import pathlib
import shlex
import tomllib

from normlab_cli import normlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
# Tiny sizes, appended after the documented options (a later --set wins): widths 64 and 256 stay.
TINY = ["--set", "model.n_layer=1", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.steps=6", "--set", "train.eval_interval=6", "--set", "train.eval_batches=1",
        "--set", "train.checkpoint_interval=0", "--set", "train.log_interval=3",
        "--set", "optim.warmup_steps=0", "--set", "train.threads=1"]


def recipe():
    """The commands of docs/mup.md's "Carrying a learning rate across width" code block."""
    doc = (ROOT / "docs" / "mup.md").read_text()
    text = doc.split("## Carrying a learning rate across width")[1]
    block = text.split("```sh\n")[1].split("```")[0]
    cmds = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert len(cmds) == 3 and all(c[0] == "build/normlab" for c in cmds), cmds
    return [c[1:] for c in cmds]


def test_the_mup_width_recipe_runs_and_keeps_the_tuned_base(tmp_path):
    (ROOT / "configs" / "tiny.toml").exists()
    tune, widen, report = recipe()
    at = lambda args: [str(tmp_path / a) if a.startswith("runs/") else
                       str(ROOT / a) if a.startswith("configs/") else a for a in args]
    p = normlab(*at(tune), *TINY, check=0)
    assert "warning" not in p.stderr, p.stderr
    s = json.loads((tmp_path / "runs" / "mup_narrow" / "sweep.json").read_text())
    lr = s["sensitivity"][0]["best_lr"]
    assert lr in (1e-3, 3e-3, 1e-2), s["sensitivity"]
    widen = [a.replace("optim.lr=LR", f"optim.lr={lr:g}") for a in widen]
    p = normlab(*at(widen), *TINY, check=0)
    assert "base model" not in p.stderr, p.stderr
    wide = tmp_path / "runs" / "mup_wide"
    cfgs = {r: tomllib.loads((wide / r / "config.toml").read_text())["model"]
            for r in [d.name for d in wide.iterdir() if (d / "config.toml").exists()]}
    assert sorted(m["d_model"] for m in cfgs.values()) == [64, 256]
    for m in cfgs.values():  # d_ff follows d_model: 4 x, as tiny.toml's 256 at d 64
        assert m["d_ff"] == 4 * m["d_model"] and m["parametrization"] == "mup"
    normlab(*at(report), check=0)
    assert (tmp_path / "runs" / "mup_report.html").exists()
    # Without d_ff_mult the same width sweep keeps d_ff = 256: its base (d 64, d_ff 64) is not the
    # config at d 64 (d_ff 256), and sweep says so before training.
    plain = [a for a in at(widen) if a != "model.d_ff_mult=4"]
    plain = [a for i, a in enumerate(plain) if not (a == "--set" and plain[i + 1].startswith("--"))]
    plain[plain.index("--out") + 1] = str(tmp_path / "plain")
    p = normlab(*plain, *TINY, check=0)
    assert "its μP base model (d_model 64: d_ff 64, 4 heads of 16) is not the point" in p.stderr, \
        p.stderr
    assert "set model.d_ff_mult = 4" in p.stderr, p.stderr


def test_info_gives_the_gate_its_mup_class():
    """`normlab info` and docs/norm_free.md agree: the per-head gate at a fixed number of heads is
    readout-like (with the head), per value it is matrix-like."""
    base = ["info", "--set", "model.parametrization=mup", "--set", "model.mup_base_width=64",
            "--set", "model.d_model=128", "--set", "model.d_ff=512", "--set", "model.n_layer=2"]
    out = normlab(*base, "--set", "model.attn_gate=head", check=0).stdout
    line = next(l for l in out.splitlines() if "readout-like" in l)
    assert line.strip().startswith("2 readout-like tensors (fan-in x2, fan-out fixed: "
                                   "blocks.0.attn.wg.weight and 1 more)"), line
    assert "output x mult / fan-in x" in line
    # per value (and with the head untied: the head is readout-like too)
    out = normlab(*base, "--set", "model.attn_gate=elementwise",
                  "--set", "model.tie_embeddings=false", check=0).stdout
    line = next(l for l in out.splitlines() if "readout-like" in l)
    assert "1 readout-like tensors" in line and "lm_head.weight" in line, line
    doc = (ROOT / "docs" / "norm_free.md").read_text()
    assert "heads, W_g (n_head, d_model) is readout-like" in doc


def test_heads_follow_the_width_when_asked():
    """model.n_head = 0 with model.head_dim set: d_model / head_dim heads at every width (so that
    a width sweep keeps heads of the tuned size); without a head_dim that divides d_model, the
    error says what 0 asks for."""
    def model(*sets):
        p = normlab("train", "--dump-config", *[a for s in sets for a in ("--set", s)], check=0)
        return tomllib.loads(p.stdout)["model"]
    for width in (64, 256):
        m = model("model.n_head=0", "model.head_dim=16", f"model.d_model={width}",
                  "model.d_ff_mult=4")
        assert (m["n_head"], m["head_dim"], m["d_ff"]) == (width // 16, 16, 4 * width)
    p = normlab("train", "--dump-config", "--set", "model.n_head=0", check=2)
    assert "model.n_head = 0 must be > 0, unless model.head_dim divides model.d_model" in p.stderr
