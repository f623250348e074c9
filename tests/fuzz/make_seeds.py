#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets into tests/fuzz/corpus/<target>/.

Run from anywhere with the project's .venv (it needs torch and safetensors):
    .venv/bin/python tests/fuzz/make_seeds.py
Deterministic: the same files every time. Seeds are small on purpose (libFuzzer mutates them;
large seeds only slow it down). Files named regression-* are inputs that once crashed a target;
this script leaves them alone.
"""

import struct
from pathlib import Path

import torch
from safetensors.torch import save as pt_save

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CORPUS = HERE / "corpus"


def write(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


def safetensors_seeds():
    g = torch.Generator().manual_seed(0)
    r = lambda *shape: torch.randn(*shape, generator=g)
    write("safetensors", "f32_2x3", pt_save({"w": r(2, 3)}))
    write("safetensors", "f64_f16_bf16", pt_save(
        {"a": r(3).double(), "b": r(2, 2).half(), "c": r(4).bfloat16()}))
    write("safetensors", "ints", pt_save({
        "i64": torch.arange(-3, 3), "i32": torch.arange(4, dtype=torch.int32),
        "i16": torch.tensor([-2, 7], dtype=torch.int16), "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "u8": torch.tensor([0, 255], dtype=torch.uint8), "u16": torch.tensor([65535], dtype=torch.uint16),
        "u32": torch.tensor([4294967295], dtype=torch.uint32)}))
    write("safetensors", "bool_u64_c64", pt_save({
        "b": torch.tensor([True, False]), "u": torch.tensor([1], dtype=torch.uint64),
        "c": torch.tensor([1 + 2j], dtype=torch.complex64)}))
    write("safetensors", "f8", pt_save({
        "e4m3": r(3).to(torch.float8_e4m3fn), "e5m2": r(2).to(torch.float8_e5m2)}))
    write("safetensors", "scalar", pt_save({"s": torch.tensor(1.5), "k": torch.tensor(7)}))
    write("safetensors", "zero_size", pt_save({
        "empty": torch.zeros(0), "empty2": torch.zeros(3, 0, 2, dtype=torch.int32),
        "x": r(2)}))
    write("safetensors", "metadata", pt_save({"w": r(1, 2)}, metadata={"format": "pt", "k": "\u00e9\u4e2d"}))
    write("safetensors", "empty_file", pt_save({}))
    # Hand-made: the sub-byte F4 dtype (two elements per byte) and a name with escapes.
    header = b'{"f4":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},"n\\u0001\\"":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}}'
    write("safetensors", "f4_escapes", struct.pack("<Q", len(header)) + header + b"\x12\x34\x56\x78")


def config_seeds():
    for p in sorted((ROOT / "configs").glob("*.toml")):
        write("config", p.stem + ".toml", p.read_bytes())
    write("config", "overrides", "model.placement=peri\nmodel.n_layer=3\noptim.lr=1e-3\n"
          "train.seed=7\ndata.path=\"corpus.txt\"\nmodel.norm_bias=true\noptim.schedule=linear\n")
    write("config", "bad_types", "[model]\nn_layer = 2.0\nd_model = \"64\"\n[optim]\nlr = [1]\n"
          "[tran]\nsteps = 5\n")


def text_seeds():
    gloss = (ROOT / "data" / "wordnet_glosses.txt").read_bytes()
    write("text_corpus", "glosses_2k", gloss[:2048])
    write("text_corpus", "utf8", "Grüße, 世界! 🙂\ttab\r\nnext line\n" * 8)
    write("text_corpus", "short", "abcdefghij\n")
    write("text_corpus", "controls", "text\x01with\x1b[0m controls\x7f" + "x" * 300)
    write("text_corpus", "bad_utf8", b"caf\xc3 \xed\xa0\x80 \xf4\x90\x80\x80 ok" + b"y" * 64)


def token_file(tokens, vocab, width=None):
    if width is None:
        width = 1 if vocab <= 256 else 2 if vocab <= 65536 else 4
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    head = b"NLTOKENS" + struct.pack("<IIQII", 1, width, len(tokens), vocab, 0)
    return head + struct.pack("<" + fmt * len(tokens), *tokens)


def token_file_v2(tokens, vocab, record):
    """Version 2: the tokenizer record (JSON, padded with spaces to a multiple of 8) after the
    header."""
    width = 1 if vocab <= 256 else 2 if vocab <= 65536 else 4
    fmt = {1: "B", 2: "H", 4: "I"}[width]
    record = record.encode()
    record += b" " * (-len(record) % 8)
    head = b"NLTOKENS" + struct.pack("<IIQII", 2, width, len(tokens), vocab, len(record))
    return head + record + struct.pack("<" + fmt * len(tokens), *tokens)


def token_seeds():
    write("token_file", "v2_record", token_file_v2(
        [0, 299, 7], 300, '{"describe":"tokenizer.json BPE, 300 tokens","hash":'
        '"fnv1a64:0123456789abcdef","path":"/data/tok.json","vocab_size":300}'))
    write("token_file", "w1_v256", token_file(list(range(0, 256, 7)), 256))
    write("token_file", "w1_v10", token_file([0, 9, 3, 3, 1], 10))
    write("token_file", "w2_v50257", token_file([0, 50256, 1234, 40000], 50257))
    write("token_file", "w4_v100000", token_file([99999, 0, 65536, 5], 100000))
    write("token_file", "w4_vmax", token_file([2**31 - 2, 1], 2**31 - 1))
    write("token_file", "single", token_file([0], 1))
    write("token_file", "out_of_vocab", token_file([1, 2, 10], 10))
    write("token_file", "truncated", token_file([1, 2, 3], 10)[:-1])


if __name__ == "__main__":
    safetensors_seeds()
    config_seeds()
    text_seeds()
    token_seeds()
    for d in sorted(CORPUS.iterdir()):
        files = list(d.iterdir())
        print(f"{d.name}: {len(files)} files, {sum(f.stat().st_size for f in files)} bytes")
