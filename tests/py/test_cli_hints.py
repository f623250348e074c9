"""Small command-line messages of issue 50: no default shown for a required option in any --help,
a TOML syntax error inside an unclosed bracket points at the bracket's line, and eval --data's
errors name --data (not data.path) with a fix that is an eval command for the run."""
import random
import re

import pytest
from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
        "--set", "model.d_ff=64", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.eval_interval=0", "--set", "train.threads=1", "--set", "train.steps=2"]


def subcommands(help_text):
    """The names listed under "Subcommands:" in a --help text."""
    out, inside = [], False
    for line in help_text.splitlines():
        if line.startswith("Subcommands:"):
            inside = True
        elif inside and re.match(r"  \S", line):
            out.append(line.split()[0])
        elif inside and line and not line.startswith(" "):
            inside = False
    return out


def option_entries(help_text):
    """Each option's lines of a --help text joined (an entry starts at "  -")."""
    entries = []
    for line in help_text.splitlines():
        if re.match(r"  -", line):
            entries.append(line)
        elif entries and line.startswith("      "):
            entries[-1] += " " + line.strip()
    return entries


def test_no_required_option_shows_a_default():
    seen, required = 0, 0
    todo = [[c] for c in subcommands(normlab("--help", check=0).stdout)]
    assert ["tokenizer"] in todo and ["eval"] in todo
    while todo:
        cmd = todo.pop()
        text = normlab(*cmd, "--help", check=0).stdout
        seen += 1
        todo += [cmd + [s] for s in subcommands(text)]
        for e in option_entries(text):
            if "REQUIRED" in e:
                required += 1
                assert "[default:" not in e, f"normlab {' '.join(cmd)}: {e}"
    assert seen > 15 and required > 5
    t = normlab("tokenizer", "train", "--help", check=0).stdout
    assert "--vocab-size" in t and "[default: 0]" not in t


def test_a_toml_syntax_error_points_at_the_unclosed_bracket(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text('[model]\nd_model = 64\n# a [comment] and a "string ["\nname = "x [y"\n'
                 'layer_pattern = ["global", "sliding"\nn_head = 4\n\n[optim]\nlr = 1e-3\n')
    p = normlab("train", "--config", f, "--dump-config", check=2)
    assert f"{f}:5:17: TOML syntax error: the '[' opened here is not closed" in p.stderr, p.stderr
    assert "stopped at line 6" in p.stderr, p.stderr
    # an error with no bracket open keeps the parser's own place
    f.write_text("[model]\nd_model = = 64\n")
    p = normlab("train", "--config", f, "--dump-config", check=2)
    assert f"{f}:2:" in p.stderr and "not closed" not in p.stderr, p.stderr


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("hints")
    normlab("train", "--out", d / "run", *TINY, check=0)
    rng = random.Random(2)
    (d / "text.txt").write_text(" ".join(rng.choice(["norm", "gate", "head", "width"])
                                         for _ in range(3000)))
    return d


def test_eval_data_errors_name_the_option_and_a_command(run):
    missing = run / "nothing.txt"
    p = normlab("eval", "--checkpoint", run / "run", "--data", missing, check=3)
    assert f"--data {missing}: no such file or folder" in p.stderr, p.stderr
    assert "data.path" not in p.stderr, p.stderr
    # A token file of another tokenizer: named as --data, and the advice is eval / tokenize
    # commands for this run, the second of which runs as printed once TEXT is filled in.
    normlab("tokenizer", "train", "--data", run / "text.txt", "--vocab-size", "270",
            "--out", run / "tok.json", check=0)
    normlab("tokenize", "-i", run / "text.txt", "-o", run / "other.tok",
            "--tokenizer", run / "tok.json", check=0)
    p = normlab("eval", "--checkpoint", run / "run", "--data", run / "other.tok", check=3)
    err = p.stderr
    assert f"token file --data {run / 'other.tok'}" in err and "data.path" not in err, err
    assert f"normlab eval --checkpoint {run / 'run'} --data TEXT" in err, err
    m = re.search(r"normlab tokenize --input TEXT --out TEXT\.tok --tokenizer (\S+), then", err)
    assert m and m.group(1) == "bytes", err
    text, toks = run / "text.txt", run / "text.tok"
    normlab("tokenize", "--input", text, "--out", toks, "--tokenizer", m.group(1), check=0)
    normlab("eval", "--checkpoint", run / "run", "--data", toks, check=0)
