"""Runs with real tokenizers (issue #13), end to end through the CLI.

- A model imported from transformers with its tokenizer (tokenizer.json trained here with the
  `tokenizers` package: GPT-2 byte-level BPE, Llama 3 style Split + ByteLevel, Llama 2 / Gemma
  style SentencePiece BPE with byte fallback) generates, from a text prompt, the same greedy text
  as transformers' generate with that tokenizer (both stop at EOS).
- export --to hf writes the tokenizer files; AutoTokenizer loads them and encodes as the original.
- train on text with data.tokenizer: the run keeps its copy of the tokenizer; eval reports bits
  per byte = loss / ln 2 / bytes per token; a model vocabulary smaller than the tokenizer's is
  refused with a clear message.
- train --init-from: copied parameters are the source's bit for bit, new ones (QK-Norm gains)
  are initialised, dropped ones listed, a shape mismatch refused by name.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

torch.set_num_threads(1)
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import transformers  # noqa: E402
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers  # noqa: E402
from transformers import AutoTokenizer, PreTrainedTokenizerFast  # noqa: E402

from normlab_cli import normlab  # noqa: E402
from test_hf_interop import hf_configs, make_hf_model  # noqa: E402

transformers.logging.set_verbosity_error()

ROOT = Path(__file__).resolve().parents[2]
CORPUS = (ROOT / "data" / "wordnet_glosses.txt").read_text(encoding="utf-8")[:200_000]
MIXED = ["naïve café — 東京で日本語を話す", "emoji 👩‍👩‍👧 and 👍🏽 ok", "שלום עולם مرحبا بالعالم",
         "e\u0301 combining", "tabs\tand  double  spaces\n\nnew lines"]
TRAIN_TEXTS = CORPUS.splitlines() + MIXED * 20
VOCAB = 300  # tokenizer size; the models' vocabulary (320) holds it
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def gpt2_style():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.train_from_iterator(TRAIN_TEXTS, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return tok, {"eos_token": "<|endoftext|>"}


def llama3_style():
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(pattern=__import__("tokenizers").Regex(LLAMA3_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TRAIN_TEXTS, trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<|begin_of_text|>", "<|end_of_text|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)])
    return tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


def sentencepiece_style(strip_space):
    """Llama 2 (strip_space) / Gemma: ▁ for spaces, byte fallback (<0xNN> tokens), BOS template."""
    base = Tokenizer(models.BPE())
    base.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    base.train_from_iterator(TRAIN_TEXTS, trainers.BpeTrainer(
        vocab_size=VOCAB - 256, special_tokens=["<unk>", "<s>", "</s>"], show_progress=False))
    spec = json.loads(base.to_str())
    trained = sorted(spec["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in trained:
        if piece not in vocab:
            vocab[piece] = len(vocab)
    spec["model"].update(vocab=vocab, byte_fallback=True, unk_token="<unk>", fuse_unk=True)
    for t in spec["added_tokens"]:
        t["id"] = vocab[t["content"]]
    tok = Tokenizer.from_str(json.dumps(spec))
    steps = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip_space:
        steps.append(decoders.Strip(" ", 1, 0))
    tok.decoder = decoders.Sequence(steps)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


TOKENIZERS = {"gpt2": gpt2_style, "llama3": llama3_style,
              "llama2": lambda: sentencepiece_style(True), "gemma": lambda: sentencepiece_style(False)}
# (transformers family, tokenizer style)
GENERATE_CASES = [("gpt2", "gpt2"), ("llama", "llama3"), ("llama", "llama2"), ("gemma2", "gemma")]
PROMPTS = ["The quick brown fox", "naïve café 東京", "a small"]
NEW = 8


def save_hf(tmp_path, family, style, seed=3):
    tok, special = TOKENIZERS[style]()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **special)
    # The model's vocabulary holds the tokenizer's, padded beyond it (as real models often are).
    cfg = hf_configs(V=(len(fast) + 7) // 8 * 8 + 8)[family]
    if family == "gpt2":
        cfg.n_positions = 64  # room for the prompts' tokens and the continuation
    else:
        cfg.max_position_embeddings = 64
    cfg.bos_token_id = fast.bos_token_id
    cfg.eos_token_id = fast.eos_token_id
    model = make_hf_model(family, cfg, seed=seed)
    model.generation_config.bos_token_id = fast.bos_token_id
    model.generation_config.eos_token_id = fast.eos_token_id
    hf_dir = tmp_path / "hf"
    model.save_pretrained(hf_dir, safe_serialization=True)
    fast.save_pretrained(hf_dir)
    assert (hf_dir / "tokenizer.json").exists()
    return model, fast, hf_dir


def generate_text(run_dir, prompt):
    """`normlab generate` greedy; stdout as bytes decoded strictly (no newline translation)."""
    exe = Path(os.environ["NORMLAB_BUILD_DIR"]) / "normlab"
    p = subprocess.run([str(exe), "generate", "--checkpoint", str(run_dir), "--prompt", prompt,
                        "--temperature", "0", "--max-new-tokens", str(NEW)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    return p.stdout.decode("utf-8")


@pytest.mark.parametrize("family,style", GENERATE_CASES)
def test_imported_model_generates_text_as_transformers(family, style, tmp_path):
    model, fast, hf_dir = save_hf(tmp_path, family, style)
    run_dir = tmp_path / "run"
    p = normlab("import", "--from", "hf", hf_dir, "--out", run_dir, check=0)
    assert "tokenizer: tokenizer.json BPE" in p.stdout, p.stdout
    assert (run_dir / "tokenizer.json").exists()
    for prompt in PROMPTS:
        ids = fast(prompt)["input_ids"]
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), max_new_tokens=NEW, do_sample=False,
                                 eos_token_id=fast.eos_token_id, pad_token_id=fast.eos_token_id)
        want = fast.decode(out[0].tolist(), skip_special_tokens=True)
        assert want.startswith(prompt) or style in ("llama2", "gemma"), (want, prompt)
        got = generate_text(run_dir, prompt)
        # normlab prints the prompt as given, then the decoded continuation.
        assert got == prompt + want[len(fast.decode(ids, skip_special_tokens=True)):] + "\n", (
            f"[{family}/{style}] prompt {prompt!r}: normlab {got!r} vs transformers {want!r} "
            f"(ids {out[0].tolist()})")
    print(f"  [{family}/{style}] {len(PROMPTS)} prompts: text equal")


def test_export_writes_a_tokenizer_autotokenizer_loads(tmp_path):
    model, fast, hf_dir = save_hf(tmp_path, "llama", "llama3")
    run_dir, out = tmp_path / "run", tmp_path / "exported"
    normlab("import", "--from", "hf", hf_dir, "--out", run_dir, check=0)
    p = normlab("export", "--to", "hf", run_dir, "--out", out, check=0)
    assert "tokenizer.json" in p.stdout
    again = AutoTokenizer.from_pretrained(out)
    for text in PROMPTS + MIXED:
        assert again(text)["input_ids"] == fast(text)["input_ids"], text
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["eos_token_id"] == fast.eos_token_id and cfg["bos_token_id"] == fast.bos_token_id


MODEL_ARGS = ["--set", "model.n_layer=2", "--set", "model.d_model=32", "--set", "model.n_head=2",
              "--set", "model.d_ff=64", "--set", "model.seq_len=32"]


def train_args(out, steps=4):
    return ["--set", "train.batch_size=2", "--set", f"train.steps={steps}", "--set", "train.eval_interval=0",
            "--set", "train.eval_batches=2", "--set", "train.threads=1", "--set", "train.log_interval=1",
            "--out", out]


def small_run_args(out, steps=4):
    return MODEL_ARGS + train_args(out, steps)


def write_corpus(folder):
    folder.mkdir()
    (folder / "a.txt").write_text(CORPUS[:60_000], encoding="utf-8")
    (folder / "b.txt").write_text("\n".join(MIXED * 50), encoding="utf-8")


def test_train_with_a_tokenizer_keeps_it_and_reports_bits_per_byte(tmp_path):
    tok, _ = gpt2_style()
    tok_file = tmp_path / "my tokenizer.json"
    tok.save(str(tok_file))
    write_corpus(tmp_path / "text")
    run_dir = tmp_path / "run"
    # A model vocabulary below the tokenizer's is refused before anything is trained (the
    # default, 256, would become the tokenizer's: an explicit other value is kept and checked).
    p = normlab("train", *small_run_args(run_dir), "--set", f"data.path={tmp_path / 'text'}",
                "--set", f"data.tokenizer={tok_file}", "--set", "model.vocab_size=288")
    assert p.returncode != 0
    assert "model.vocab_size = 288 is smaller than the vocabulary of the tokenizer" in p.stderr, p.stderr
    assert f"({VOCAB} tokens)" in p.stderr
    normlab("train", *small_run_args(run_dir), "--set", f"data.path={tmp_path / 'text'}",
            "--set", f"data.tokenizer={tok_file}", "--set", f"model.vocab_size={VOCAB}", check=0)
    assert (run_dir / "tokenizer.json").read_bytes() == tok_file.read_bytes()
    tok_file.unlink()  # the run's copy is what eval and generate use from now on
    p = normlab("eval", "--checkpoint", run_dir, "--batches", "2", check=0)
    line = next(x for x in p.stdout.splitlines() if x.startswith("loss"))
    loss = float(line.split()[1])
    bpb = float(line.split("bits/byte")[1].split()[0])
    bytes_per_token = float(line.split("(")[1].split()[0])
    # The same number computed here from the `tokenizers` package: the folder's files encoded one
    # by one and joined by the end-of-text token <|endoftext|>, the last 5% as validation, eval's
    # 2 batches x 2 rows of 32 tokens evenly spaced over it, each target counted with the bytes
    # its token stands for.
    ids = []
    for i, f in enumerate(sorted((tmp_path / "text").iterdir())):
        ids += ([tok.token_to_id("<|endoftext|>")] if i else []) + tok.encode(f.read_text(encoding="utf-8")).ids
    val = ids[len(ids) - math.floor(len(ids) * 0.05 + 0.5):]
    T, windows = 32, 4
    offsets = [j * (len(val) - T - 1) // (windows - 1) for j in range(windows)]
    unbyte = {c: b for b, c in byte_level_alphabet().items()}
    size = [len(bytes(unbyte[c] for c in tok.id_to_token(i))) if i else 0 for i in range(tok.get_vocab_size())]
    want = sum(size[t] for o in offsets for t in val[o + 1:o + T + 1]) / (windows * T)
    assert abs(bytes_per_token - want) < 6e-4, (line, want)
    assert bytes_per_token > 1.1, line  # a BPE token stands for more than one byte
    assert math.isclose(bpb, loss / math.log(2) / bytes_per_token, rel_tol=2e-3), line
    assert "tokenizer.json BPE" in p.stdout
    g = normlab("generate", "--checkpoint", run_dir, "--prompt", "The cat", "--max-new-tokens", "5",
                "--temperature", "0", check=0)
    assert g.stdout.startswith("The cat")


def byte_level_alphabet():
    """GPT-2's byte -> printable character map (ByteLevel): printable Latin-1 bytes map to
    themselves, the others to U+0100 and up, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def ckpt(run_dir):
    return run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()


def test_init_from_copies_matching_parameters(tmp_path):
    base = tmp_path / "base"
    normlab("train", *small_run_args(base), check=0)
    src = load_file(str(ckpt(base) / "model.safetensors"))
    # Retrofit QK-Norm with lr 1e-30 (one AdamW step moves no float32 weight): the checkpoint holds
    # the starting weights.
    new = tmp_path / "qk"
    p = normlab("train", "--init-from", base, "--set", "model.qk_norm=rmsnorm", "--set", "optim.lr=1e-30",
                *train_args(new, steps=1), check=0)
    assert "initialised from" in p.stdout and "new (initialised)" in p.stdout, p.stdout
    assert "q_norm" in p.stdout
    got = load_file(str(ckpt(new) / "model.safetensors"))
    for name, t in src.items():
        assert torch.equal(got[name], t), name
    qk = [n for n in got if n not in src]
    assert qk and all("q_norm" in n or "k_norm" in n for n in qk), qk
    for n in qk:
        assert torch.equal(got[n], torch.ones_like(got[n])), n  # RMSNorm gains start at 1
    # The reverse drops them: listed, not an error.
    back = tmp_path / "back"
    p = normlab("train", "--init-from", new, "--set", "model.qk_norm=none", *train_args(back, steps=1),
                check=0)
    assert f"{len(qk)} dropped" in p.stdout, p.stdout
    # A shape change is refused by name, and nothing is written.
    bad = tmp_path / "bad"
    p = normlab("train", "--init-from", base, "--set", "model.d_ff=96", *train_args(bad, steps=1))
    assert p.returncode != 0
    assert "shape" in p.stderr and "mlp" in p.stderr, p.stderr
    assert not (bad / "checkpoints").exists()
