"""`normlab tokenizer` against the reference implementations (issue 13):
(a) SentencePiece .model files trained here with the `sentencepiece` package's trainer (BPE with
    byte fallback, Unigram): ids equal to the package's for thousands of lines of the embedded
    corpus and for mixed-script Unicode and whitespace runs; decode of encoded and of random ids
    equal to the package's, and the exact bytes behind them consistent with it;
(b) `normlab tokenizer train` on a folder: the `tokenizers` package loads the file, round-trips
    text through it and encodes the test texts to the ids normlab gives; the merges equal those of
    tokenizers' own BpeTrainer with the same settings;
(c) errors on the command line: exit status and a message naming the problem.
Nothing is downloaded: every tokenizer is trained in the test."""
import codecs
import io
import json
import pathlib
import random

import pytest
from normlab_cli import normlab

ROOT = pathlib.Path(__file__).resolve().parents[2]
GLOSSES = (ROOT / "data" / "wordnet_glosses.txt").read_text(encoding="utf-8").splitlines()

# Mixed scripts, written out: CJK, emoji (with ZWJ and skin tones), combining marks, right-to-left
# (Hebrew, Arabic), Indic, and whitespace in runs and of other kinds.
MIXED = [
    "日本語のテキストと中文文本，混合在一起。",
    "한국어 문장도 있습니다.",
    "emoji 😀😃 👩‍👩‍👧‍👦 👍🏽 🇯🇵 flags",
    "cafe\u0301 vs café, n\u0303, a\u0308\u0301 stacked marks, Z\u0335\u0321a\u0336\u0322l",
    "שלום עולם, this is mixed with עברית",
    "مرحبا بالعالم ١٢٣ and digits 123",
    "हिन्दी पाठ और বাংলা লেখা",
    "tabs\tand\t\tmore\ttabs",
    "runs     of      spaces   ",
    "   leading and trailing   ",
    "ideographic\u3000space and nbsp\u00a0here",
    "Ελληνικά και Русский текст",
    "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "ﬁ ligature and ℌ𝔢𝔩𝔩𝔬 math letters",
    "",
    " ",
    "x",
]


def random_lines(n, seed):
    """Lines of random code points from several scripts, marks, emoji and whitespace."""
    rng = random.Random(seed)
    ranges = [(0x20, 0x7E), (0xA0, 0x24F), (0x300, 0x36F), (0x370, 0x3FF), (0x400, 0x4FF),
              (0x590, 0x5FF), (0x600, 0x6FF), (0x900, 0x97F), (0x3040, 0x30FF), (0x4E00, 0x9FFF),
              (0xAC00, 0xD7A3), (0x1F300, 0x1F64F), (0x1F900, 0x1F9FF), (0xFF00, 0xFFEF)]
    spaces = [" ", "  ", "\t", "\u3000", "\u00a0", "   "]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.25:
                parts.append(rng.choice(spaces))
            else:
                lo, hi = rng.choice(ranges)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def write_lines(path, lines):
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def encode_lines(tok, lines, tmp_path, *extra):
    """normlab's ids for each line (one `encode --lines` call)."""
    f = write_lines(tmp_path / "lines.txt", lines)
    out = normlab("tokenizer", "encode", "--tokenizer", tok, "--input", f, "--lines", *extra,
                  check=0).stdout.split("\n")
    assert out[-1] == "" and len(out) == len(lines) + 1, (len(out), len(lines))
    return [[int(t) for t in line.split(",")] if line else [] for line in out[:-1]]


def decode_lists(tok, lists, tmp_path, *extra):
    f = tmp_path / "ids.txt"
    f.write_text("\n".join(",".join(map(str, v)) for v in lists) + "\n")
    out = normlab("tokenizer", "decode", "--tokenizer", tok, "--ids-file", f, *extra,
                  check=0).stdout.split("\n")
    assert out[-1] == "" and len(out) == len(lists) + 1
    return [json.loads(line) for line in out[:-1]]


# --- (a) SentencePiece ---------------------------------------------------------------------------

SP_KINDS = {
    "bpe_byte_fallback": dict(model_type="bpe", vocab_size=800, byte_fallback=True,
                              character_coverage=0.9995),
    "unigram": dict(model_type="unigram", vocab_size=600, character_coverage=1.0),
}


@pytest.fixture(scope="module", params=list(SP_KINDS))
def sp_model(request, tmp_path_factory):
    spm = pytest.importorskip("sentencepiece")
    # The random lines of the tests are not trained on: their characters are mostly unknown to
    # the model (byte fallback, or <unk>).
    train = GLOSSES[:6000] + MIXED * 20
    buf = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(train), model_writer=buf,
                                   num_threads=2, minloglevel=2, **SP_KINDS[request.param])
    path = tmp_path_factory.mktemp("sp") / f"{request.param}.model"
    path.write_bytes(buf.getvalue())
    return request.param, path, spm.SentencePieceProcessor(model_file=str(path))


def test_sentencepiece_ids_equal_the_package(sp_model, tmp_path):
    kind, path, sp = sp_model
    # Held-out glosses (not trained on) plus the mixed-script and random lines.
    lines = GLOSSES[20000:23000] + MIXED + random_lines(1500, seed=2)
    got = encode_lines(path, lines, tmp_path)
    want = [sp.encode(x) for x in lines]
    bad = [i for i in range(len(lines)) if got[i] != want[i]]
    assert not bad, f"{kind}: {len(bad)} of {len(lines)} differ; first {lines[bad[0]]!r}: " \
                    f"{got[bad[0]]} vs {want[bad[0]]}"
    # With BOS, when the model has one (the trainer's default gives <s> id 1).
    assert sp.bos_id() >= 0
    got_bos = encode_lines(path, lines[:50], tmp_path, "--add-special")
    assert got_bos == [[sp.bos_id()] + sp.encode(x) for x in lines[:50]]


def test_sentencepiece_whole_texts_with_newlines_and_runs(sp_model, tmp_path):
    kind, path, sp = sp_model
    texts = ["\n".join(MIXED), "a\n\n\nb  \n  c\t\n", "  many    spaces\n\n  and lines  ",
             "\n".join(GLOSSES[30000:30200])]
    for i, t in enumerate(texts):
        f = tmp_path / f"t{i}.txt"
        f.write_bytes(t.encode("utf-8"))
        out = normlab("tokenizer", "encode", "--tokenizer", path, "--input", f, check=0).stdout
        got, want = [int(x) for x in out.strip().split(",") if x], sp.encode(t)
        if kind == "unigram" and got != want:
            # Known: Debian's libsentencepiece (0.1.97) sums Unigram path scores in float, and on
            # a long text (here 20 KB) a near tie can go the other way than in the PyPI package
            # (0.2.x). Both must then spell the same text with scores within float resolution.
            score = lambda ids: sum(sp.get_score(x) for x in ids)
            assert sp.decode(got) == sp.decode(want), (kind, i)
            assert abs(score(got) - score(want)) < 0.01, (kind, i, score(got), score(want))
            continue
        assert got == want, (kind, i)


def per_byte_replace(e):
    return "\ufffd", e.start + 1


codecs.register_error("normlab_test_per_byte", per_byte_replace)


def test_sentencepiece_decode_equals_the_package(sp_model, tmp_path):
    kind, path, sp = sp_model
    lines = GLOSSES[40000:40500] + MIXED + random_lines(300, seed=3)
    encoded = [sp.encode(x) for x in lines]
    rng = random.Random(4)
    n = sp.get_piece_size()
    randoms = [[rng.randrange(n) for _ in range(rng.randint(0, 20))] for _ in range(1500)]
    # Byte pieces in random runs: incomplete and invalid UTF-8 sequences.
    byte_ids = [i for i in range(n) if sp.is_byte(i)]
    if byte_ids:
        randoms += [[rng.choice(byte_ids) for _ in range(rng.randint(1, 8))] for _ in range(500)]
    lists = encoded + randoms
    got = decode_lists(path, lists, tmp_path)
    want = [sp.decode(v) for v in lists]
    bad = [i for i in range(len(lists)) if got[i] != want[i]]
    assert not bad, f"{kind}: {len(bad)} of {len(lists)} differ; first {lists[bad[0]]}: " \
                    f"{got[bad[0]]!r} vs {want[bad[0]]!r}"
    # Round trip where the package's holds.
    for x, g in zip(lines, got):
        if sp.decode(sp.encode(x)) == x:
            assert g == x
    # The exact bytes: valid UTF-8 where the package's text has no U+FFFD it made up, and the
    # package's text is those bytes with each invalid byte replaced.
    raw = [bytes.fromhex(h) for h in decode_lists(path, lists, tmp_path, "--hex")]
    for v, b, w in zip(lists, raw, want):
        assert b.decode("utf-8", "normlab_test_per_byte") == w, (v, b, w)
    # skip_special drops the control pieces and <unk>.
    special = {sp.bos_id(), sp.eos_id(), sp.unk_id()} - {-1}
    got_skip = decode_lists(path, randoms[:300], tmp_path, "--skip-special")
    assert got_skip == [sp.decode([i for i in v if i not in special]) for v in randoms[:300]]


def test_sentencepiece_info(sp_model):
    kind, path, sp = sp_model
    out = normlab("tokenizer", "info", "--tokenizer", path, check=0).stdout
    want_type = "BPE" if kind.startswith("bpe") else "Unigram"
    fallback = "yes" if kind == "bpe_byte_fallback" else "no"
    assert f"SentencePiece {want_type}, {sp.get_piece_size()} tokens, byte fallback {fallback}" \
        in out, out
    assert f"bos: {sp.bos_id()} " in out and f"eos: {sp.eos_id()} " in out, out
    assert f"unk: {sp.unk_id()} " in out and "pad: none" in out, out


def test_sentencepiece_refuses_invalid_utf8(sp_model, tmp_path):
    _, path, _ = sp_model
    f = tmp_path / "bad.txt"
    f.write_bytes(b"valid start \xe3\x81 broken")
    p = normlab("tokenizer", "encode", "--tokenizer", path, "--input", f)
    assert p.returncode == 3, p.stderr
    assert "not valid UTF-8 at byte offset 12" in p.stderr and str(path) in p.stderr, p.stderr


# --- (b) BPE training ----------------------------------------------------------------------------

TEST_TEXTS = GLOSSES[50000:51000] + MIXED + random_lines(500, seed=5) + [
    "<|endoftext|> special in text <|endoftext|>", "it's they're we've I'm you'll he'd",
    "numbers 1234567 and 3.14159", "   \t  ", "trailing spaces   "]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    folder = d / "texts"
    folder.mkdir()
    # Three documents: glosses, more glosses, mixed-script text.
    (folder / "a.txt").write_text("\n".join(GLOSSES[:20000]) + "\n", encoding="utf-8")
    (folder / "b.txt").write_text("\n".join(GLOSSES[20000:30000]) + "\n", encoding="utf-8")
    (folder / "c.txt").write_text("\n".join(MIXED * 5 + random_lines(200, seed=6)) + "\n",
                                  encoding="utf-8")
    out = d / "tokenizer.json"
    p = normlab("tokenizer", "train", "--data", folder, "--vocab-size", 2000, "--out", out,
                "--special-tokens", "<|endoftext|>,<|pad|>", check=0)
    assert "2000 tokens (2 special" in p.stdout and "tokens/byte" in p.stdout, p.stdout
    return folder, out


def test_trained_file_loads_in_tokenizers_and_round_trips(trained):
    tokenizers = pytest.importorskip("tokenizers")
    _, path = trained
    tok = tokenizers.Tokenizer.from_file(str(path))
    assert tok.get_vocab_size() == 2000
    assert tok.token_to_id("<|endoftext|>") == 0 and tok.token_to_id("<|pad|>") == 1
    for x in TEST_TEXTS:
        assert tok.decode(tok.encode(x).ids, skip_special_tokens=False) == x


def test_trained_merges_equal_tokenizers_trainer(trained):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    folder, path = trained
    docs = [(folder / n).read_text(encoding="utf-8") for n in ("a.txt", "b.txt", "c.txt")]
    ref = tokenizers.Tokenizer(models.BPE())
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    ref.post_processor = processors.ByteLevel(trim_offsets=True)
    trainer = trainers.BpeTrainer(vocab_size=2000, min_frequency=2, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|pad|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    ref.train_from_iterator(docs, trainer)
    want = json.loads(ref.to_str())["model"]
    got = json.loads(path.read_text(encoding="utf-8"))["model"]
    assert got["vocab"] == want["vocab"]
    assert got["merges"] == want["merges"]


@pytest.mark.parametrize("prefix,min_frequency", [(True, 2), (False, 5)])
def test_trainer_options_equal_tokenizers_trainer(tmp_path, prefix, min_frequency):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import models, pre_tokenizers, trainers
    docs = ["\n".join(GLOSSES[:4000]), "\n".join(MIXED * 3), "  leading spaces", "x"]
    for i, d in enumerate(docs):
        (tmp_path / f"d{i}.txt").write_text(d, encoding="utf-8")
    out = tmp_path / "tok.json"
    normlab("tokenizer", "train", "--data", tmp_path, "--vocab-size", 1000, "--out", out,
            "--min-frequency", min_frequency, *(["--add-prefix-space"] if prefix else []),
            check=0)
    ref = tokenizers.Tokenizer(models.BPE())
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix)
    trainer = trainers.BpeTrainer(vocab_size=1000, min_frequency=min_frequency,
                                  show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    ref.train_from_iterator(docs, trainer)
    want = json.loads(ref.to_str())
    got = json.loads(out.read_text(encoding="utf-8"))
    assert got["model"]["merges"] == want["model"]["merges"]
    assert got["model"]["vocab"] == want["model"]["vocab"]
    assert got["pre_tokenizer"]["add_prefix_space"] is prefix


def test_trained_ids_equal_tokenizers(trained, tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    _, path = trained
    tok = tokenizers.Tokenizer.from_file(str(path))
    lines = list(TEST_TEXTS)
    got = encode_lines(path, lines, tmp_path)
    want = [tok.encode(x).ids for x in lines]
    bad = [i for i in range(len(lines)) if got[i] != want[i]]
    assert not bad, f"{len(bad)} of {len(lines)} differ; first {lines[bad[0]]!r}"


# --- (c) errors ----------------------------------------------------------------------------------

def test_train_errors(tmp_path):
    f = tmp_path / "t.txt"
    f.write_text("some text to train on\n")
    p = normlab("tokenizer", "train", "--data", tmp_path / "missing", "--vocab-size", 300,
                "--out", tmp_path / "o.json")
    assert p.returncode == 3 and "missing" in p.stderr, p.stderr
    p = normlab("tokenizer", "train", "--data", f, "--vocab-size", 257, "--special-tokens",
                "<s>,</s>", "--out", tmp_path / "o.json")
    assert p.returncode == 3, p.stderr
    assert "vocab_size 257 is smaller than the 256 byte symbols plus 2 special tokens (258)" \
        in p.stderr, p.stderr
    assert not (tmp_path / "o.json").exists()
    p = normlab("tokenizer", "train", "--data", f, "--vocab-size", "abc", "--out", tmp_path / "o")
    assert p.returncode == 2 and "must be a positive integer, not 'abc'" in p.stderr, p.stderr


def test_encode_decode_errors(tmp_path):
    p = normlab("tokenizer", "encode", "--tokenizer", tmp_path / "none.model", "--text", "x")
    assert p.returncode == 3 and "none.model" in p.stderr and "cannot open" in p.stderr, p.stderr
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"\x00\x01\x02 this is no model")
    p = normlab("tokenizer", "info", "--tokenizer", bad)
    assert p.returncode == 3 and "bad.model" in p.stderr and "SentencePiece" in p.stderr, p.stderr
    p = normlab("tokenizer", "decode", "--tokenizer", "bytes", "--ids", "1,300")
    assert p.returncode == 3 and "300" in p.stderr, p.stderr
    p = normlab("tokenizer", "decode", "--tokenizer", "bytes", "--ids", "1,x")
    assert p.returncode == 3 and "'x' is not a token id" in p.stderr, p.stderr
    p = normlab("tokenizer", "encode", "--tokenizer", "bytes")
    assert p.returncode == 3 and "--text or --input" in p.stderr, p.stderr
    p = normlab("tokenizer")
    assert p.returncode == 2, p.stderr


def test_bytes_tokenizer_through_the_cli():
    out = normlab("tokenizer", "encode", "--tokenizer", "bytes", "--text", "hé", check=0).stdout
    assert out == "104,195,169\n"
    out = normlab("tokenizer", "encode", "--tokenizer", "bytes", "--text", "hé", "--tokens",
                  check=0).stdout
    assert json.loads(out) == ["h", "\ufffd", "\ufffd"]
    assert normlab("tokenizer", "decode", "--tokenizer", "bytes", "--ids", "104,195,169",
                   check=0).stdout == "hé\n"
