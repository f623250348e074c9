"""Differential test of normlab's tokenizer.json engine against the `tokenizers` package.

Each family's tokenizer is trained here with `tokenizers`' own BpeTrainer (small vocabularies, on a
slice of the embedded corpus plus mixed-script text; nothing is downloaded), configured with the
family's normalizer, pre-tokenizer, decoder and post-processor, given added tokens of every kind,
and written to a temporary tokenizer.json. normlab loads that file through tests/tok_driver and
must give the same ids (add_special off and on) for the corpus lines, mixed-script Unicode,
whitespace and digit runs, added tokens inside text and NFC-sensitive input, and the same decoded
text (skip_special off and on) for those ids and for random id sequences. Hostile files must be
refused with FormatError naming the JSON path. utf8_lossy is checked against Python's decoder.
"""

import json
import os
import random
import subprocess
from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from tokenizers import processors, trainers

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "data" / "wordnet_glosses.txt"

GPT2_PATTERN = (
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
)
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MIXED = [
    "日本語のテキストと漢字、中文句子。한국어 문장도 있습니다.",
    "emoji: 😀 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷 ❤️‍🔥 🧑🏿‍💻",
    "combining: e\u0301 a\u0308 n\u0303 Z\u0335\u0336\u0337 q\u0323\u0307",
    "Arabic: مرحبا بالعالم، كيف حالك؟ Hebrew: שלום עולם",
    "Devanagari: नमस्ते दुनिया, क्षत्रिय। Thai: สวัสดีชาวโลก ภาษาไทย",
    "Greek Ελληνικά, Cyrillic кириллица Ёё, Armenian Հայերեն, Georgian ქართული",
    "math ∑∫√∞ ≠ ≤ ≥ ± × ÷ and arrows ←↑→↓ ⇒ and box ┌─┐",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'Ve ſ K",
    "mixed123abc 456,789.01 ١٢٣ ४५६ ௭௮ ½ ² Ⅻ",
    "tabs\tand\t\ttabs, newline\nand\r\nCRLF\r\n\r\n and nbsp\u00a0here\u3000ideographic",
    "control \x01\x02\x7f and nel \u0085 and zwsp \u200b and bom \ufeff end",
]

WHITESPACE = [
    " ", "  ", "   leading", "trailing   ", "a  b   c    d", "\t", "\t\t x", "\n", "\n\n\n",
    "line\n", "\r\n", "a\r\nb\r\n\r\nc", " \n \n ", "\u00a0", "\u00a0\u00a0x", "\u3000\u3000",
    "x \u3000 y", "  \t \n  \r\n  z", "end with space ", "\u2028\u2029 sep", "\u0085\u0085",
]

DIGITS = [
    "0", "12", "123", "1234", "12345", "1234567890123", "3.14159", "1,000,000", "v2.0.1-rc3",
    "x1y22z333", "٣٤٥٦٧", "2024-11-30T12:34:56Z", "phone 555-0199 ext 42",
]

NFC = [
    "cafe\u0301", "café", "e\u0301e\u0301e\u0301", "A\u030a ångström Å", "\u1e9b\u0323",
    "ko\u0308ln Köln", "\u0041\u030a\u0301", "한\u1100\u1161",
]


def corpus_lines(n, start=0):
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [x for x in lines[start : start + n] if x]


def train_texts():
    return corpus_lines(3000) + MIXED * 3 + WHITESPACE + DIGITS


@pytest.fixture(scope="module")
def driver():
    build = os.environ.get("NORMLAB_BUILD_DIR")
    if not build:
        pytest.fail("NORMLAB_BUILD_DIR is not set; it must name the CMake build directory that "
                    "holds tests/tok_driver (ctest sets it)")
    path = Path(build) / "tests" / "tok_driver"
    if not path.is_file():
        pytest.fail(f"{path} does not exist; build the tok_driver target first")
    return path


def run(driver, args, lines=None, check=True):
    inp = "".join(line + "\n" for line in lines) if lines is not None else ""
    p = subprocess.run([str(driver), *args], input=inp.encode(), capture_output=True)
    if check and p.returncode != 0:
        raise AssertionError(f"tok_driver {args} failed: {p.stderr.decode(errors='replace')}")
    return p


# --- families ----------------------------------------------------------------------------------

EXTRA_TOKENS = [
    AddedToken("<mask>", lstrip=True, rstrip=False, special=True, normalized=False),
    AddedToken("[NUM]", single_word=True, special=False, normalized=False),
    AddedToken("<sep>", rstrip=True, special=False, normalized=False),
    AddedToken("hello world", special=False, normalized=True),
]


def with_added(tok, specials):
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in specials])
    tok.add_tokens(EXTRA_TOKENS)
    return tok


def gpt2(add_prefix_space=False):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_texts(), trainer)
    return with_added(tok, [])


def split_byte_level(pattern, nfc, ignore_merges, bos):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=1000, special_tokens=[bos, "<|eot|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_texts(), trainer)
    bos_id = tok.token_to_id(bos)
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A $B",
                                      special_tokens=[(bos, bos_id)]),
    ])
    return with_added(tok, [])


def byte_fallback_tokenizer(normalizer, pre, decoder, template_bos, train_pre, eos=None):
    """A SentencePiece-style BPE: <unk>, <s>, </s>, the 256 <0xNN> tokens, then trained pieces."""
    base = Tokenizer(models.BPE())
    base.normalizer = normalizers.Replace(" ", "▁")
    base.pre_tokenizer = train_pre
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False, limit_alphabet=120)
    base.train_from_iterator(train_texts(), trainer)
    trained = json.loads(base.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    merges = trained["merges"]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m) if isinstance(m, list) else
                                                    tuple(m.split(" ")) for m in merges],
                               unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    if normalizer is not None:
        tok.normalizer = normalizer
    if pre is not None:
        tok.pre_tokenizer = pre
    tok.decoder = decoder
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in ["<unk>", "<s>", "</s>"]])
    single = f"{template_bos} $A" + (f" {eos}" if eos else "")
    specials = [(template_bos, vocab[template_bos])] + ([(eos, vocab[eos])] if eos else [])
    tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=specials)
    return with_added(tok, [])


def llama2():
    return byte_fallback_tokenizer(
        normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]), None,
        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                           decoders.Strip(" ", 1, 0)]),
        "<s>", pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always"))


def gemma():
    return byte_fallback_tokenizer(
        normalizers.Replace(" ", "▁"), None,
        decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]),
        "<s>", pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never"), eos="</s>")


def metaspace(scheme):
    return byte_fallback_tokenizer(
        None, pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme, split=True),
        decoders.Sequence([decoders.ByteFallback(),
                           decoders.Metaspace(replacement="▁", prepend_scheme=scheme)]),
        "<s>", pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=scheme))


def digits_split():
    """Not a family: Digits and Split behaviors in front of ByteLevel, to cover those paths."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(",", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="merged_with_next"),
        pre_tokenizers.Split(Regex(r"[.;:]"), behavior="contiguous"),
        pre_tokenizers.Split(Regex(r"\(|\)"), behavior="removed", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False),
    ])
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(),
                                           normalizers.Replace(Regex(r"[0-9]{4,}"), "#")])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_texts(), trainer)
    return with_added(tok, ["<|endoftext|>"])


def digits_individual():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.Split(Regex(r" "), behavior="isolated", invert=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(train_texts(), trainer)
    return with_added(tok, [])


FAMILIES = {
    "gpt2": lambda: gpt2(False),
    "gpt2_prefix_space": lambda: gpt2(True),
    "llama3": lambda: split_byte_level(LLAMA3_PATTERN, False, True, "<|begin_of_text|>"),
    "olmo2": lambda: split_byte_level(LLAMA3_PATTERN, True, False, "<|endoftext|>"),
    "qwen2": lambda: split_byte_level(QWEN2_PATTERN, True, False, "<|im_start|>"),
    "llama2": llama2,
    "gemma": gemma,
    "metaspace_first": lambda: metaspace("first"),
    "metaspace_always": lambda: metaspace("always"),
    "digits_split": digits_split,
    "digits_individual": digits_individual,
}


def sample_texts():
    added = [
        "<mask>", "a <mask> b", "x  <mask>y", "[NUM] 5", "a[NUM]b", "[NUM]", "see [NUM].",
        "<sep>   next", "<sep>", "say hello world now", "hello  world", "HELLO WORLD hello world",
        "<s>hello</s>", " <s> spaced </s> ", "<unk><unk>", "<|endoftext|>tail", "a<|endoftext|>",
        "<|begin_of_text|>x", "<|im_start|>user\nhi<|im_start|>", "<|eot|><|eot|>",
    ]
    lines = corpus_lines(4000, start=1000)
    # Some lines glued into longer chunks (multi-sentence words, newlines inside).
    chunks = ["\n".join(lines[i : i + 7]) for i in range(0, 700, 7)]
    return lines + chunks + MIXED + WHITESPACE + DIGITS + NFC + added + [""]


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_matches_reference(family, driver, tmp_path):
    tok = FAMILIES[family]()
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str(), encoding="utf-8")
    texts = sample_texts()
    want_plain = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    want_special = [e.ids for e in tok.encode_batch(texts, add_special_tokens=True)]
    out = run(driver, ["encode", str(path)], [json.dumps(t) for t in texts]).stdout.decode()
    got = [json.loads(line) for line in out.split("\n")[:-1]]
    assert len(got) == len(texts)
    bad = [(t, w, g[0]) for t, w, g in zip(texts, want_plain, got) if w != g[0]]
    bad_s = [(t, w, g[1]) for t, w, g in zip(texts, want_special, got) if w != g[1]]
    assert not bad, f"{family}: {len(bad)} of {len(texts)} differ, first: {bad[0]!r}"
    assert not bad_s, f"{family}: {len(bad_s)} of {len(texts)} differ (add_special), first: {bad_s[0]!r}"

    # Decode: the encodings, then random id sequences (partial UTF-8, invalid <0xNN> runs).
    vocab = tok.get_vocab_size(with_added_tokens=True)
    rng = random.Random(hash(family) & 0xFFFF)
    byte_ids = [tok.token_to_id(f"<0x{b:02X}>") for b in range(256)]
    byte_ids = [i for i in byte_ids if i is not None]
    seqs = want_special + want_plain[-300:]
    for _ in range(1500):
        n = rng.randint(1, 12)
        pool = byte_ids if byte_ids and rng.random() < 0.4 else None
        seqs.append([rng.choice(pool) if pool and rng.random() < 0.7 else rng.randrange(vocab)
                     for _ in range(n)])
    out = run(driver, ["decode", str(path)], [json.dumps(s) for s in seqs]).stdout.decode()
    got = [json.loads(line) for line in out.split("\n")[:-1]]
    assert len(got) == len(seqs)
    bad = []
    for s, g in zip(seqs, got):
        for skip, text in ((False, g[0]), (True, g[1])):
            want = tok.decode(s, skip_special_tokens=skip)
            if want != text:
                bad.append((s, skip, want, text))
    assert not bad, f"{family}: {len(bad)} decodes differ, first: {bad[0]!r}"

    info = json.loads(run(driver, ["info", str(path)]).stdout)
    assert info["vocab_size"] == vocab
    batch = run(driver, ["batch", str(path)], [json.dumps(t) for t in texts[:2000]])
    assert batch.stdout.decode().strip() == "same"
    print(f"\n[{family}] {len(texts)} texts: ids equal (add_special off and on); "
          f"{len(seqs)} id sequences: decode equal (skip_special off and on); "
          f"vocab {vocab}; {info['describe']}")


def test_info_specials(driver, tmp_path):
    tok = FAMILIES["gemma"]()
    path = tmp_path / "tokenizer.json"
    path.write_text(tok.to_str(), encoding="utf-8")
    info = json.loads(run(driver, ["info", str(path)]).stdout)
    assert info["bos"] == 1 and info["eos"] == 2 and info["unk"] == 0
    assert info["describe"].startswith("tokenizer.json BPE, byte fallback, ")
    tok = FAMILIES["gpt2"]()
    path.write_text(tok.to_str(), encoding="utf-8")
    info = json.loads(run(driver, ["info", str(path)]).stdout)
    assert info["bos"] is None and info["eos"] is None
    assert info["describe"] == f"tokenizer.json BPE, byte-level, {tok.get_vocab_size()} tokens"


# --- hostile files -----------------------------------------------------------------------------

def small_doc():
    tok = FAMILIES["llama3"]()
    return json.loads(tok.to_str())


def hostile_cases():
    cases = []

    def case(name, mutate, pattern):
        doc = small_doc()
        mutate(doc)
        cases.append((name, json.dumps(doc), pattern))

    case("unknown pre-tokenizer in a sequence",
         lambda d: d["pre_tokenizer"]["pretokenizers"].insert(1, {"type": "Whitespace"}),
         r'/pre_tokenizer/pretokenizers/1/type: "Whitespace" is not supported')
    case("unknown normalizer",
         lambda d: d.__setitem__("normalizer", {"type": "BertNormalizer"}),
         r'/normalizer/type: "BertNormalizer" is not supported')
    case("unknown decoder",
         lambda d: d.__setitem__("decoder", {"type": "Sequence", "decoders": [
             {"type": "Fuse"}, {"type": "WordPiece", "prefix": "##"}]}),
         r'/decoder/decoders/1/type: "WordPiece" is not supported')
    case("unknown post-processor",
         lambda d: d.__setitem__("post_processor", {"type": "BertProcessing"}),
         r'/post_processor/type: "BertProcessing" is not supported')
    case("Unigram model", lambda d: d["model"].__setitem__("type", "Unigram"),
         r'/model/type: "Unigram" is not supported')
    case("WordPiece model", lambda d: d["model"].__setitem__("type", "WordPiece"),
         r'/model/type: "WordPiece" is not supported')
    case("merge with an unknown token",
         lambda d: d["model"]["merges"].insert(3, ["nosuchtoken", "x"]),
         r'/model/merges/3: "nosuchtoken" is not in the vocabulary')
    case("duplicate id",
         lambda d: d["model"]["vocab"].__setitem__("zzzunique", 5),
         r"/model/vocab/zzzunique: id")
    case("id gap",
         lambda d: d["model"]["vocab"].__setitem__(
             "zzzunique", len(d["model"]["vocab"]) + 7),
         r"/model/vocab/zzzunique: id \d+ is outside")
    case("dropout", lambda d: d["model"].__setitem__("dropout", 0.1), r"/model/dropout")
    case("continuing_subword_prefix",
         lambda d: d["model"].__setitem__("continuing_subword_prefix", "##"),
         r"/model/continuing_subword_prefix")
    case("truncation", lambda d: d.__setitem__("truncation", {"max_length": 5}), r"/truncation")
    case("bad regex",
         lambda d: d["pre_tokenizer"]["pretokenizers"][0].__setitem__("pattern", {"Regex": "(("}),
         r"/pre_tokenizer/pretokenizers/0/pattern/Regex: invalid regular expression")
    case("added token id not the reference's",
         lambda d: d["added_tokens"][-1].__setitem__("id", 999999),
         r"/added_tokens/\d+/id: id 999999")
    text = json.dumps(small_doc())
    cases.append(("truncated JSON", text[: len(text) // 2], r"not valid JSON"))
    cases.append(("deep nesting", '{"model": ' + "[" * 100000 + "]" * 100000 + "}",
                  r"nested deeper than 64"))
    cases.append(("deep nesting in a component", '{"normalizer": ' + '{"a":' * 70 + "1" +
                  "}" * 70 + "}", r"nested deeper than 64"))
    cases.append(("model not an object", '{"model": [1, 2]}', r"/model: expected an object"))
    return cases


@pytest.mark.parametrize("name,doc,pattern", hostile_cases(), ids=[c[0] for c in hostile_cases()])
def test_hostile_files_refused(name, doc, pattern, driver, tmp_path):
    import re

    path = tmp_path / "tok.json"
    path.write_text(doc, encoding="utf-8")
    p = run(driver, ["info", str(path)], check=False)
    err = p.stderr.decode(errors="replace")
    assert p.returncode == 1, f"{name}: exit {p.returncode}, stderr {err!r}"
    assert err.startswith("FormatError: [tokenizer] "), err
    assert str(path) in err, err
    assert re.search(pattern, err), f"{name}: {err!r} does not match {pattern!r}"
    # Where the file is broken (not merely outside normlab's set), the reference refuses it too.
    if name in {"truncated JSON", "merge with an unknown token", "bad regex",
                "model not an object"}:
        with pytest.raises(Exception):
            Tokenizer.from_str(doc)


# --- UTF-8 ----------------------------------------------------------------------------------------

def test_utf8_lossy_matches_python(driver):
    rng = random.Random(7)
    pieces = [b"\xe4\xb8\xad", b"\xf0\x9f\x98\x80", b"\xc3\xa9", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
              b"\xc0\xaf", b"\xe0\x80\xaf", b"\xf8\x88\x80\x80\x80", b"a", b"\x80", b"\xbf", b"\xff"]
    samples = []
    for _ in range(4000):
        parts = []
        for _ in range(rng.randint(0, 8)):
            r = rng.random()
            if r < 0.4:
                parts.append(rng.choice(pieces))
            elif r < 0.6:
                p = rng.choice(pieces)
                parts.append(p[: rng.randint(0, len(p))])
            else:
                parts.append(bytes(rng.randrange(256) for _ in range(rng.randint(1, 4))))
        samples.append(b"".join(parts))
    out = run(driver, ["lossy"], [s.hex() for s in samples]).stdout.decode()
    got = [json.loads(line) for line in out.split("\n")[:-1]]
    assert len(got) == len(samples)
    bad = [(s, g) for s, g in zip(samples, got) if s.decode("utf-8", "replace") != g]
    assert not bad, f"{len(bad)} of {len(samples)} differ, first: {bad[0]!r}"
