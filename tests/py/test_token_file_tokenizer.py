"""A token file knows its tokenizer (issue #42), end to end through the CLI.

`normlab tokenize` records in the token file which tokenizer made it (vocabulary, content hash,
path). Training on the file without data.tokenizer uses that tokenizer: the run keeps its copy,
model.vocab_size defaults to its vocabulary, `eval` reports it and `generate` encodes and decodes
with it. Another tokenizer (bytes included) is refused naming both; so is a recorded tokenizer
that is gone or has changed; a version 1 file, which records none, is not guessed at. Documents
are joined by the tokenizer's end-of-text token, and the byte tokenizer's files stay as they were.
"""
from __future__ import annotations

import pathlib
import shutil
import struct

import pytest

from normlab_cli import BUILD, normlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
GLOSSES = (ROOT / "data" / "wordnet_glosses.txt").read_text(encoding="utf-8").splitlines()
VOCAB = 400
SMALL = ["--set", "model.n_layer=1", "--set", "model.d_model=32", "--set", "model.n_head=2",
         "--set", "model.d_ff=64", "--set", "model.seq_len=32", "--set", "train.batch_size=4",
         "--set", "train.steps=3", "--set", "train.eval_batches=2", "--set", "optim.warmup_steps=1",
         "--set", "train.threads=1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Two documents, a BPE tokenizer trained on them (with <|endoftext|>, id 0) and the token
    file `normlab tokenize` makes of them with it."""
    d = tmp_path_factory.mktemp("tokfile")
    docs = d / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("\n".join(GLOSSES[:600]) + "\n", encoding="utf-8")
    (docs / "b.txt").write_text("\n".join(GLOSSES[600:1200]) + "\n", encoding="utf-8")
    tok = d / "tok.json"
    normlab("tokenizer", "train", "--data", docs, "--vocab-size", VOCAB, "--special-tokens",
            "<|endoftext|>", "--out", tok, check=0)
    data = d / "docs.tok"
    p = normlab("tokenize", "--input", docs, "--tokenizer", tok, "--out", data, check=0)
    assert "documents joined by the end-of-text token <|endoftext|> (id 0)" in p.stdout, p.stdout
    assert f"tokenizer recorded: tokenizer.json BPE, byte-level, {VOCAB} tokens ({tok}, fnv1a64:" \
        in p.stdout, p.stdout
    return {"dir": d, "docs": docs, "tok": tok, "data": data}


def header(path):
    """(version, width, count, vocab, field 28) of a token file."""
    b = pathlib.Path(path).read_bytes()
    assert b[:8] == b"NLTOKENS"
    return struct.unpack_from("<IIQII", b, 8)


def tokens(path):
    b = pathlib.Path(path).read_bytes()
    version, width, count, _, r = header(path)
    start = 32 + (r if version == 2 else 0)
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    return list(struct.unpack_from(f"<{count}{fmt}", b, start))


def encode(tok, path):
    out = normlab("tokenizer", "encode", "--tokenizer", tok, "--input", path, check=0).stdout
    return [int(x) for x in out.strip().split(",")]


def test_the_token_file_records_its_tokenizer_and_joins_documents_by_eos(corpus):
    version, width, count, vocab, r = header(corpus["data"])
    assert (version, width, vocab) == (2, 2, VOCAB) and r % 8 == 0 and r > 0
    record = pathlib.Path(corpus["data"]).read_bytes()[32:32 + r].decode()
    assert f'"path":"{corpus["tok"]}"' in record and f'"vocab_size":{VOCAB}' in record, record
    # The two documents, each encoded alone, joined by <|endoftext|> (id 0) and not by "\n".
    a, b = encode(corpus["tok"], corpus["docs"] / "a.txt"), encode(corpus["tok"], corpus["docs"] / "b.txt")
    assert tokens(corpus["data"]) == a + [0] + b
    assert count == len(a) + 1 + len(b)


def test_training_uses_the_recorded_tokenizer(corpus, tmp_path):
    run = tmp_path / "run"
    normlab("train", "--out", run, *SMALL, "--set", f"data.path={corpus['data']}", check=0)
    # The run keeps the tokenizer, and its config names it and the vocabulary it defaulted to.
    assert (run / "tokenizer.json").read_bytes() == corpus["tok"].read_bytes()
    cfg = (run / "config.toml").read_text()
    assert f"vocab_size = {VOCAB}\n" in cfg, cfg
    assert f'tokenizer = "{corpus["tok"]}"' in cfg, cfg
    e = normlab("eval", "--checkpoint", run, check=0).stdout
    assert f"tokenizer tokenizer.json BPE, byte-level, {VOCAB} tokens" in e, e
    line = next(x for x in e.splitlines() if x.startswith("loss"))
    bytes_per_token = float(line.split("(")[1].split()[0])
    assert bytes_per_token > 1.5, line  # BPE tokens, not bytes
    # generate --prompt encodes and decodes with the BPE: the same text as the ids of the prompt
    # continued (--prompt-ids) and decoded by the tokenizer.
    prompt = "a small domesticated"
    ids = normlab("tokenizer", "encode", "--tokenizer", corpus["tok"], "--text", prompt,
                  check=0).stdout.strip()
    assert any(int(i) >= 256 for i in ids.split(",")), ids
    common = ["--checkpoint", run, "--temperature", "0", "--max-new-tokens", "6", "--ignore-eos"]
    out_ids = normlab("generate", *common, "--prompt-ids", ids, check=0).stdout.split()
    want = normlab("tokenizer", "decode", "--tokenizer", corpus["tok"], "--skip-special", "--ids",
                   ",".join(out_ids), check=0).stdout
    got = normlab("generate", *common, "--prompt", prompt, check=0).stdout
    assert got.startswith(prompt)
    assert got.rstrip("\n") == want.rstrip("\n"), (got, want)
    # A token file of another tokenizer is not evaluated with this one.
    byte_file = tmp_path / "bytes.tok"
    normlab("tokenize", "--input", corpus["docs"], "--out", byte_file, check=0)
    p = normlab("eval", "--checkpoint", run, "--data", byte_file)
    assert p.returncode == 3, p.stderr
    assert f"the run's tokenizer, {run / 'tokenizer.json'}" in p.stderr, p.stderr
    assert f"is not the tokenizer that made the token file --data {byte_file}: bytes" \
        in p.stderr, p.stderr
    # Still so once the original tokenizer file is gone: the run uses its copy.
    moved = tmp_path / "moved.json"
    shutil.copy(corpus["tok"], moved)
    corpus["tok"].unlink()
    try:
        assert normlab("generate", *common, "--prompt", prompt, check=0).stdout == got
        assert f"{VOCAB} tokens" in normlab("eval", "--checkpoint", run, check=0).stdout
        normlab("train", "--resume", run, "--set", "train.steps=4", check=0)
    finally:
        shutil.copy(moved, corpus["tok"])


def test_the_python_run_uses_the_recorded_tokenizer(corpus, tmp_path):
    if not list((pathlib.Path(BUILD) / "python" / "normlab").glob("_core*.so")):
        pytest.skip("the Python extension is not built")
    from normlab_py import normlab as nl
    run = tmp_path / "run"
    normlab("train", "--out", run, *SMALL, "--set", f"data.path={corpus['data']}", check=0)
    r = nl.Run(run)
    assert r.eval()["tokenizer"] == f"tokenizer.json BPE, byte-level, {VOCAB} tokens"
    prompt = "a small domesticated"
    cli = normlab("generate", "--checkpoint", run, "--temperature", "0", "--max-new-tokens", "6",
                  "--ignore-eos", "--prompt", prompt, check=0).stdout
    py = r.generate(prompt, max_new_tokens=6, temperature=0, ignore_eos=True)
    assert cli.rstrip("\n") == prompt + py, (cli, py)


def test_another_tokenizer_is_refused_naming_both(corpus, tmp_path):
    other = tmp_path / "other.json"
    normlab("tokenizer", "train", "--data", corpus["docs"], "--vocab-size", 300, "--out", other,
            check=0)
    for spec, named in (("bytes", "data.tokenizer = bytes"), (other, f"data.tokenizer = {other}")):
        p = normlab("train", "--out", tmp_path / "r", *SMALL, "--set", f"data.path={corpus['data']}",
                    "--set", f"data.tokenizer={spec}")
        assert p.returncode == 3, p.stderr
        err = p.stderr
        assert named in err and str(corpus["tok"]) in err and str(corpus["data"]) in err, err
        assert "is not the tokenizer that made the token file" in err, err
        assert not (tmp_path / "r").exists()
    # The recorded tokenizer, named explicitly, is accepted.
    normlab("train", "--out", tmp_path / "ok", *SMALL, "--set", f"data.path={corpus['data']}",
            "--set", f"data.tokenizer={corpus['tok']}", check=0)
    assert (tmp_path / "ok" / "tokenizer.json").exists()


def test_an_init_from_source_of_another_tokenizer_is_refused(corpus, tmp_path):
    normlab("train", "--out", tmp_path / "src", *SMALL, check=0)  # bytes, the embedded corpus
    p = normlab("train", "--out", tmp_path / "r", *SMALL, "--set", f"data.path={corpus['data']}",
                "--init-from", tmp_path / "src")
    assert p.returncode == 3, p.stderr
    assert "the tokenizer of train.init_from = " in p.stderr and str(corpus["tok"]) in p.stderr
    assert "set data.tokenizer to the one to train with" in p.stderr, p.stderr


def test_a_recorded_tokenizer_that_is_gone_or_changed_is_refused(corpus, tmp_path):
    tok = tmp_path / "tok.json"
    shutil.copy(corpus["tok"], tok)
    data = tmp_path / "d.tok"
    normlab("tokenize", "--input", corpus["docs"], "--tokenizer", tok, "--out", data, check=0)
    tok.write_bytes(tok.read_bytes() + b"\n")  # same tokenizer to JSON, another file
    p = normlab("train", "--out", tmp_path / "r", *SMALL, "--set", f"data.path={data}")
    assert p.returncode == 3
    assert f"data.path = {data} was tokenized with {tok}" in p.stderr, p.stderr
    assert "has changed since (its hash is now fnv1a64:" in p.stderr, p.stderr
    tok.unlink()
    p = normlab("train", "--out", tmp_path / "r", *SMALL, "--set", f"data.path={data}")
    assert p.returncode == 3
    assert f"was tokenized with {tok}" in p.stderr and "which is gone" in p.stderr, p.stderr


def test_vocab_size_defaults_to_the_tokenizers_and_explicit_values_stay(corpus, tmp_path):
    normlab("train", "--out", tmp_path / "big", *SMALL, "--set", f"data.path={corpus['data']}",
            "--set", "model.vocab_size=512", check=0)
    assert "vocab_size = 512\n" in (tmp_path / "big" / "config.toml").read_text()
    p = normlab("train", "--out", tmp_path / "small", *SMALL, "--set", f"data.path={corpus['data']}",
                "--set", "model.vocab_size=300")
    assert p.returncode == 3
    assert "model.vocab_size = 300 is smaller than the vocabulary of the tokenizer" in p.stderr
    # `info` shows the model train would build: the tokenizer's vocabulary, and the tokenizer.
    out = normlab("info", "--set", f"data.path={corpus['data']}", check=0).stdout
    assert f"vocab {VOCAB}, seq_len" in out and "tokenizer: tokenizer.json BPE" in out, out
    # The byte tokenizer's default stays 256 (the embedded corpus).
    normlab("train", "--out", tmp_path / "bytes", *SMALL, check=0)
    assert "vocab_size = 256\n" in (tmp_path / "bytes" / "config.toml").read_text()


def test_a_version_1_file_is_not_guessed_at(corpus, tmp_path):
    ids = tokens(corpus["data"])
    old = tmp_path / "old.tok"
    old.write_bytes(b"NLTOKENS" + struct.pack("<IIQII", 1, 2, len(ids), VOCAB, 0)
                    + struct.pack(f"<{len(ids)}H", *ids))
    p = normlab("train", "--out", tmp_path / "r", *SMALL, "--set", f"data.path={old}")
    assert p.returncode == 3
    assert f"data.path = {old} is a version 1 token file, which does not record its tokenizer" \
        in p.stderr, p.stderr
    assert f"({VOCAB} tokens)" in p.stderr and "the byte tokenizer" in p.stderr, p.stderr
    # Told which tokenizer made it, training goes on as before.
    normlab("train", "--out", tmp_path / "ok", *SMALL, "--set", f"data.path={old}",
            "--set", f"data.tokenizer={corpus['tok']}", check=0)


def test_a_byte_token_file_is_the_bytes_and_trains_as_before(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("first document\n", encoding="utf-8")
    (docs / "b.txt").write_text("second one", encoding="utf-8")
    data = tmp_path / "d.tok"
    p = normlab("tokenize", "--input", docs, "--out", data, check=0)
    assert 'documents joined by "\\n" (id 10)' in p.stdout, p.stdout
    assert "tokenizer recorded: bytes (256 tokens, one per byte) (bytes, fnv1a64:" in p.stdout
    assert bytes(tokens(data)) == b"first document\n\nsecond one"
    assert header(data)[3] == 256
    sets = ["--set", "model.seq_len=4", "--set", "data.val_fraction=0.3"]
    normlab("train", "--out", tmp_path / "r", *SMALL, *sets, "--set", f"data.path={data}", check=0)
    cfg = (tmp_path / "r" / "config.toml").read_text()
    assert "vocab_size = 256\n" in cfg and 'tokenizer = "bytes"' in cfg, cfg
    assert not (tmp_path / "r" / "tokenizer.json").exists()
    # A BPE named for a byte token file is refused too.
    other = tmp_path / "bpe.json"
    normlab("tokenizer", "train", "--data", docs, "--vocab-size", 260, "--out", other, check=0)
    p = normlab("train", "--out", tmp_path / "r2", *SMALL, *sets, "--set", f"data.path={data}",
                "--set", f"data.tokenizer={other}")
    assert p.returncode == 3 and "bytes (256 tokens, one per byte" in p.stderr, p.stderr
