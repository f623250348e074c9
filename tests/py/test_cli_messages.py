"""No silent surprises outside training (issue 12, section 3): generate beyond the context, prompts
checked before anything is printed, numeric options with human messages, checkpoints and
safetensors files named as the user gave them, runs that cannot fit in memory refused up front."""
import re
import time

import pytest
from normlab_cli import normlab

TINY = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
        "--set", "train.eval_interval=0", "--set", "train.checkpoint_interval=5",
        "--set", "train.log_interval=5", "--set", "optim.warmup_steps=2", "--set", "train.threads=1"]


@pytest.fixture(scope="module", params=["rope", "learned"])
def run(request, tmp_path_factory):
    d = tmp_path_factory.mktemp("msg") / f"run_{request.param}"
    normlab("train", "--out", d, *TINY, "--set", f"model.pos={request.param}",
            "--set", "train.steps=5", check=0)
    return d


def usage_error(p, *needles):
    """A command-line error: exit 2, the needles in stderr, no range printed to 300 digits."""
    assert p.returncode == 2, p.stderr
    for n in needles:
        assert n in p.stderr, p.stderr
    assert "not in range" not in p.stderr and not re.search(r"\d{40}", p.stderr), p.stderr


def test_generate_past_the_context_gives_every_token(run):
    # seq_len 32: a prompt of 3 ids and 80 new tokens run 51 tokens past the context.
    args = ["generate", "--checkpoint", run, "--prompt-ids", "84,104,101", "--seed", "3"]
    long = normlab(*args, "--max-new-tokens", "80", check=0).stdout.split()
    assert len(long) == 3 + 80
    assert all(0 <= int(t) < 256 for t in long)
    # Within the context the window changes nothing: the first 20 are those of a 20-token run.
    short = normlab(*args, "--max-new-tokens", "20", check=0).stdout.split()
    assert long[:23] == short
    # Text prompts too: "The " and 80 bytes.
    p = normlab("generate", "--checkpoint", run, "--prompt", "The ", "--max-new-tokens", "80",
                "--temperature", "0", check=0)
    assert p.stdout.startswith("The ") and len(p.stdout) > len("The \n")


def test_generate_help_documents_the_window():
    p = normlab("generate", "--help", check=0)
    assert "sliding" in p.stdout and "window" in p.stdout


def test_generate_checks_the_prompt_before_printing(run):
    p = normlab("generate", "--checkpoint", run, "--prompt", "x" * 40)
    assert p.returncode == 3 and p.stdout == ""
    assert "prompt has 40 tokens" in p.stderr and "model.seq_len" in p.stderr
    p = normlab("generate", "--checkpoint", run, "--prompt-ids", "1,2,300")
    assert p.returncode == 3 and p.stdout == ""
    assert "prompt token 300 (position 2)" in p.stderr and "256" in p.stderr, p.stderr
    p = normlab("generate", "--checkpoint", run, "--prompt-ids", "1,-4")
    usage_error(p, "--prompt-ids", "must be an integer >= 0, not '-4'")
    assert p.stdout == ""


@pytest.mark.parametrize("value", ["0", "-3", "abc", "2.5"])
def test_eval_batches_must_be_positive(run, value):
    p = normlab("eval", "--checkpoint", run, f"--batches={value}")
    usage_error(p, "--batches", "must be a positive integer", f"not '{value}'")


@pytest.mark.parametrize("args,needles", [
    (["--top-k", "abc"], ["--top-k", "must be an integer >= 0, not 'abc'"]),
    (["--top-k", "-1"], ["--top-k", "must be an integer >= 0"]),
    (["--temperature", "-1"], ["--temperature", "must be a number >= 0, not '-1'"]),
    (["--temperature", "nan"], ["--temperature", "must be a number >= 0"]),
    (["--top-p", "3"], ["--top-p", "must be a number from 0 to 1, not '3'"]),
    (["--max-new-tokens", "many"], ["--max-new-tokens", "must be an integer >= 0"]),
    (["--max-new-tokens", "99999999999"], ["--max-new-tokens", "up to 2147483647"]),
    (["--seed", "x"], ["--seed", "must be an integer >= 0"]),
])
def test_generate_numeric_options(run, args, needles):
    usage_error(normlab("generate", "--checkpoint", run, "--prompt", "a", *args), *needles)


def test_other_numeric_options(tmp_path):
    usage_error(normlab("gradflow", "--layers", "2,0", "--out", tmp_path / "g"),
                "--layers", "must be a positive integer, not '0'")
    usage_error(normlab("gradflow", "--steps=-1", "--out", tmp_path / "g"),
                "--steps", "must be an integer >= 0")
    usage_error(normlab("sweep", "--grid", "optim.lr=1e-3", "--jobs", "0", "--out", tmp_path / "s"),
                "--jobs", "must be a positive integer")
    usage_error(normlab("interop", "import", "--from", "hf", tmp_path, "--out", tmp_path / "i",
                        "--max-seq-len", "x"), "--max-seq-len", "must be a positive integer")


def test_checkpoint_that_is_another_file(tmp_path):
    f = tmp_path / "README.md"
    f.write_text("# normlab\n\nTrains decoder-only Transformers.\n")
    p = normlab("eval", "--checkpoint", f)
    assert p.returncode == 3
    assert f"{f} is not a checkpoint directory" in p.stderr, p.stderr
    assert "model.safetensors" not in p.stderr.split("(")[0], p.stderr


def test_text_file_named_model_safetensors(tmp_path):
    f = tmp_path / "model.safetensors"
    f.write_text("# normlab\n\nTrains decoder-only Transformers.\n")
    p = normlab("eval", "--checkpoint", f)
    assert p.returncode == 3
    assert f"{f}: not a safetensors file (header length" in p.stderr, p.stderr
    assert f"file size {len(f.read_bytes())}" in p.stderr, p.stderr


def test_run_too_large_for_memory_refused_fast(tmp_path):
    t0 = time.monotonic()
    p = normlab("train", "--out", tmp_path / "huge", "--set", "model.d_model=65536",
                "--set", "model.d_ff=262144", timeout=120)
    assert p.returncode == 2, p.stderr
    assert "needs an estimated" in p.stderr and "TiB of memory per rank" in p.stderr, p.stderr
    assert "are available" in p.stderr and "bad_alloc" not in p.stderr, p.stderr
    assert time.monotonic() - t0 < 60
    assert not (tmp_path / "huge").exists()


def test_info_prints_the_memory_estimate():
    p = normlab("info", "--set", "model.d_model=65536", "--set", "model.d_ff=262144", check=0)
    out = p.stdout
    assert "memory of a training run, per rank" in out, out
    for part in ["parameters", "gradients", "optimizer", "activations", "available"]:
        assert re.search(rf"^  {part} +\d", out, re.M), (part, out)
    assert "does NOT fit, train refuses this run" in out


# ---- issue 42: messages and the command line -------------------------------------------------

def test_generate_with_an_empty_prompt_says_so(run):
    p = normlab("generate", "--checkpoint", run, "--prompt", "")
    usage_error(p, "--prompt: the prompt is empty")
    assert "needs --prompt" not in p.stderr and p.stdout == ""


# Every option with a default shows it, once, at the end of its description ("[default: 200]"),
# not glued to its type as CLI11 does ("INT:an integer >= 0=200", "=[]"); one whose description
# says its default in words (eval --batches) keeps only those.
@pytest.mark.parametrize("command,needles,absent", [
    ("train", ["every key with its default: normlab train --dump-config"], []),
    ("eval", ["(default:"], ["[default:"]),
    ("generate", ["Tokens to generate, all of them (past seq_len with a sliding window) [default: 200]",
                  "Softmax temperature (0 = greedy) [default: 1]",
                  "Keep the k most likely tokens (0 = all) [default: 0]", "Sampling seed [default: 1]"],
     [">= 0=", "=[]"]),
    ("sweep", ["[default: runs/sweep]", "cores are divided) [default: 1]", "[default: optim.lr]"],
     ["integer=1", "=[]"]),
])
def test_help_shows_every_default(command, needles, absent):
    text = " ".join(normlab(command, "--help", check=0).stdout.split())
    for n in needles:
        assert n in text, (n, text)
    for n in absent:
        assert n not in text, (n, text)


def test_export_refusal_says_cannot_export(tmp_path):
    d = tmp_path / "post"
    normlab("train", "--out", d, *TINY, "--set", "model.placement=post", "--set", "train.steps=1",
            check=0)
    p = normlab("export", "--to", "hf", d, "--out", tmp_path / "hf")
    assert p.returncode == 2, p.stderr
    assert p.stderr.startswith("normlab: cannot export: model.placement = post: no supported "
                               "transformers family has it"), p.stderr
    assert "invalid configuration" not in p.stderr
    assert not (tmp_path / "hf").exists()


# What a nanoGPT / Hugging Face user types, through --set: the normlab key or "not supported".
@pytest.mark.parametrize("setting,answer", [
    ("model.n_embd=64", "unknown key 'model.n_embd': normlab calls it 'model.d_model'"),
    ("model.n_heads=4", "unknown key 'model.n_heads' (did you mean 'model.n_head'?)"),
    ("model.block_size=64", "normlab calls it 'model.seq_len'"),
    ("model.context_length=64", "normlab calls it 'model.seq_len'"),
    ("train.lr=1e-3", "unknown key 'train.lr' (did you mean 'optim.lr'?)"),
    ("train.learning_rate=1e-3", "normlab calls it 'optim.lr'"),
    ("optim.warmup=10", "unknown key 'optim.warmup' (did you mean 'optim.warmup_steps'?)"),
    ("train.max_steps=10", "normlab calls it 'train.steps'"),
    ("train.max_iters=10", "normlab calls it 'train.steps'"),
    ("train.iters=10", "normlab calls it 'train.steps'"),
    ("train.gradient_accumulation_steps=4", "normlab calls it 'train.grad_accum'"),
    ("train.eval_iters=20", "normlab calls it 'train.eval_batches'"),
    ("train.weight_decay=0.1", "(did you mean 'optim.weight_decay'?)"),
    ("model.dropout=0.1", "key 'model.dropout' is not supported: normlab has no dropout"),
    ("train.dropout=0.0", "key 'train.dropout' is not supported: normlab has no dropout"),
    ("train.compile=true", "key 'train.compile' is not supported"),
])
def test_names_from_other_trainers_through_set(setting, answer):
    p = normlab("train", "--dump-config", "--set", setting)
    assert p.returncode == 2 and p.stdout == "", p.stderr
    assert f"--set '{setting}': " in p.stderr and answer in p.stderr, p.stderr


def test_range_errors_name_the_line_and_the_set(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[model]\nn_layer = 0\n\n[optim]\nlr = -1.0\n")
    p = normlab("train", "--dump-config", "--config", cfg, "--set", "train.batch_size=0",
                "--set", "model.dropout=0.1")
    assert p.returncode == 2, p.stderr
    for line in [f"{cfg}:2: model.n_layer = 0 must be > 0", f"{cfg}:5: optim.lr = -1 must be > 0",
                 "--set 'train.batch_size=0': train.batch_size = 0 must be > 0",
                 "--set 'model.dropout=0.1': key 'model.dropout' is not supported"]:
        assert f"\n  {line}" in p.stderr, p.stderr
