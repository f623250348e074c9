"""Differential test of normlab's safetensors reader against the reference implementation.

Files are written by the reference package (numpy and torch front ends), then broken on purpose:
every truncation of a small file, bit flips in its header, hand-made malformed headers and a few
hundred random byte mutations (fixed seed). Each file goes to the reference
(`safetensors.deserialize`, the Rust validator behind `safetensors.numpy.load`, which also returns
BF16/F8 tensors that numpy cannot hold, and `safe_open`) and to normlab (`safetensors_tool check`).

Rules: normlab never accepts a file the reference refuses; for every file the reference accepts,
normlab accepts it with the same tensors, bytes and metadata, except where normlab is stricter on
purpose (STRICTER below, documented in include/normlab/safetensors.h). Files written by normlab's
writer (`safetensors_tool copy`) must read back identically through the reference.
"""

import json
import os
import random
import re
import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest
import safetensors
import torch
from safetensors import safe_open
from safetensors.numpy import save as np_save
from safetensors.torch import save as pt_save

# Normlab's deliberate extra rules: (why, pattern of its error message).
STRICTER = [
    ("duplicate keys", r"duplicate key"),
    ("unknown field in a tensor entry", r"unknown field"),
    ("empty tensor name", r"empty name"),
    ("__metadata__ not an object", r"__metadata__ must be an object"),
    ("header not starting with '{'", r"header must begin with '\{'"),
    ("dimension beyond int64", r"beyond the int64 range"),
    ("tensor entry as an array (serde's sequence form)", r"entry must be an object"),
    ("dtype as an object (serde's map form of an enum)", r"field 'dtype' is \{"),
]


@pytest.fixture(scope="module")
def tool():
    build = os.environ.get("NORMLAB_BUILD_DIR")
    if not build:
        pytest.fail(
            "NORMLAB_BUILD_DIR is not set; it must name the CMake build directory that holds "
            "tests/safetensors_tool (ctest sets it)"
        )
    path = Path(build) / "tests" / "safetensors_tool"
    if not path.is_file():
        pytest.fail(f"{path} does not exist; build the safetensors_tool target first")
    return path


def pack(header, data=b"", length=None):
    """A file from a header (dict, str or bytes) and a data section."""
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    n = len(header) if length is None else length
    return struct.pack("<Q", n) + header + data


def split(blob):
    (n,) = struct.unpack("<Q", blob[:8])
    return blob[8 : 8 + n], blob[8 + n :]


def reference_files():
    """Valid files written by the reference package: name -> bytes."""
    rng = np.random.default_rng(0)
    np_tensors = {
        "f64": rng.standard_normal((2, 3)),
        "f32": rng.standard_normal(4).astype(np.float32),
        "f16": rng.standard_normal((3, 2)).astype(np.float16),
        "i64": np.array([-(2**62), -1, 0, 1, 2**62], dtype=np.int64),
        "i32": np.array([[-7, 8], [2**31 - 1, -(2**31)]], dtype=np.int32),
        "i16": np.array([-3, 0, 3], dtype=np.int16),
        "i8": np.array([-128, 0, 1, 127], dtype=np.int8),
        "u8": np.arange(7, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float32),
        "c64": np.array([1 + 2j, -3j], dtype=np.complex64),
    }
    pt_tensors = {
        "bf16": torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).bfloat16(),
        "f8": torch.tensor([0.5, -1.0, 2.0, 448.0]).to(torch.float8_e4m3fn),
        "u16": torch.tensor([0, 65535], dtype=torch.uint16),
        "u32": torch.tensor([1, 2**32 - 1], dtype=torch.uint32),
        "u64": torch.tensor([3], dtype=torch.uint64),
        "scalar_i64": torch.tensor(-5, dtype=torch.int64),
        "empty_bf16": torch.zeros(4, 0, dtype=torch.bfloat16),
    }
    return {
        "numpy": np_save(np_tensors, metadata={"format": "np", "note": "ünïcode ✓"}),
        "torch": pt_save(pt_tensors, metadata={"format": "pt"}),
        "small": np_save(
            {"a": np.array([1, 2], dtype=np.int16), "b": np.array([7], dtype=np.uint8)}
        ),
        "no_tensors": np_save({}),
        "only_empty": np_save({"e": np.zeros(0, dtype=np.int8)}),
        "f4": pack({"q": {"dtype": "F4", "shape": [2, 2], "data_offsets": [0, 2]}}, b"\x12\x34"),
    }


def handmade_cases():
    """Malformed (and a few valid but unusual) files, built by hand: label -> bytes."""

    def t(dtype, shape, b, e):
        return {"dtype": dtype, "shape": shape, "data_offsets": [b, e]}

    a = '"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}'
    plain_header, plain_data = split(np_save({"a": np.arange(3)}))
    cases = {
        "empty file": b"",
        "seven bytes": b"\x02\0\0\0\0\0\0",
        "zero header": pack(""),
        "header too long": pack("{}", length=100_000_001),
        "header u64 max": pack("{}", length=2**64 - 1),
        "header 2^63": pack("{}", length=2**63),
        "header past end": pack("{}", length=3),
        "header 1 short": pack("{} ", length=2),
        "array header": pack("[]"),
        "string header": pack('"x"'),
        "number header": pack("1"),
        "null header": pack("null"),
        "leading space": pack(" {" + a + "}", b"xy"),
        "bom": pack(b"\xef\xbb\xbf{" + a.encode() + b"}", b"xy"),
        "nul padding": pack("{}\0\0"),
        "nul then garbage": pack("{}\0garbage"),
        "nul inside": pack('{"a":\0' + a[4:] + "}", b"xy"),
        "space padding": pack("{}      "),
        "pretty header": pack(json.dumps(json.loads(plain_header), indent=4), plain_data),
        "trailing comma": pack("{" + a + ",}", b"xy"),
        "comment": pack("{/*c*/" + a + "}", b"xy"),
        "invalid utf8": pack(b'{"\xff":' + a[4:].encode() + b"}", b"xy"),
        "overlong utf8": pack(b'{"\xc0\xaf":' + a[4:].encode() + b"}", b"xy"),
        "utf8 surrogate": pack(b'{"\xed\xa0\x80":' + a[4:].encode() + b"}", b"xy"),
        "escaped lone surrogate": pack('{"\\ud800":' + a[4:] + "}", b"xy"),
        "escaped pair": pack('{"\\ud83d\\ude00":' + a[4:] + "}", b"xy"),
        "control char": pack('{"a\x01":' + a[4:] + "}", b"xy"),
        "dup tensor identical": pack("{" + a + "," + a + "}", b"xy"),
        "dup tensor via escape": pack('{"\\u0061":' + a[4:] + "," + a + "}", b"xy"),
        "dup field": pack(
            '{"a":{"dtype":"U8","dtype":"U8","shape":[2],"data_offsets":[0,2]}}', b"xy"
        ),
        "dup metadata key": pack('{"__metadata__":{"k":"v","k":"w"},' + a + "}", b"xy"),
        "dup metadata": pack('{"__metadata__":{},"__metadata__":{},' + a + "}", b"xy"),
        "metadata null": pack('{"__metadata__":null,' + a + "}", b"xy"),
        "metadata array": pack('{"__metadata__":[],' + a + "}", b"xy"),
        "metadata number value": pack('{"__metadata__":{"k":1},' + a + "}", b"xy"),
        "metadata nested": pack('{"__metadata__":{"k":{}},' + a + "}", b"xy"),
        "metadata is a tensor": pack({"__metadata__": t("U8", [2], 0, 2)}, b"xy"),
        "empty name": pack({"": t("U8", [2], 0, 2)}, b"xy"),
        "entry null": pack({"a": None}),
        "entry array": pack({"a": ["U8", [2], [0, 2]]}, b"xy"),
        "entry array too long": pack({"a": ["U8", [2], [0, 2], 1]}, b"xy"),
        "extra field": pack({"a": {**t("U8", [2], 0, 2), "x": 1}}, b"xy"),
        "missing dtype": pack({"a": {"shape": [2], "data_offsets": [0, 2]}}, b"xy"),
        "missing shape": pack({"a": {"dtype": "U8", "data_offsets": [0, 2]}}, b"xy"),
        "missing offsets": pack({"a": {"dtype": "U8", "shape": [2]}}, b"xy"),
        "dtype lowercase": pack({"a": t("u8", [2], 0, 2)}, b"xy"),
        "dtype unknown": pack({"a": t("F128", [2], 0, 2)}, b"xy"),
        "dtype as map": pack({"a": t({"U8": None}, [2], 0, 2)}, b"xy"),
        "dtype number": pack({"a": t(8, [2], 0, 2)}, b"xy"),
        "shape negative": pack({"a": t("U8", [-2], 0, 2)}, b"xy"),
        "shape minus zero": pack('{"a":{"dtype":"U8","shape":[-0],"data_offsets":[0,0]}}'),
        "shape float": pack('{"a":{"dtype":"U8","shape":[2.0],"data_offsets":[0,2]}}', b"xy"),
        "shape exponent": pack('{"a":{"dtype":"U8","shape":[2e0],"data_offsets":[0,2]}}', b"xy"),
        "shape leading zero": pack('{"a":{"dtype":"U8","shape":[02],"data_offsets":[0,2]}}', b"xy"),
        "shape nested": pack({"a": t("U8", [[2]], 0, 2)}, b"xy"),
        "shape string": pack({"a": t("U8", "2", 0, 2)}, b"xy"),
        "shape huge": pack(
            '{"a":{"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,2]}}', b"xy"
        ),
        "shape overflow": pack({"a": t("U8", [2**32, 2**32], 0, 0)}),
        "shape overflow then zero": pack({"a": t("U8", [2**40, 2**40, 0], 0, 0)}),
        "shape big then zero": pack({"a": t("U8", [2**40, 2**20, 0], 0, 0)}),
        "shape u64 max then zero": pack({"a": t("U8", [2**64 - 1, 0], 0, 0)}),
        "bits overflow": pack({"a": t("F64", [2**61], 0, 0)}),
        "offsets three": pack({"a": {**t("U8", [2], 0, 2), "data_offsets": [0, 2, 3]}}, b"xy"),
        "offsets one": pack({"a": {"dtype": "U8", "shape": [2], "data_offsets": [2]}}, b"xy"),
        "offsets object": pack({"a": {"dtype": "U8", "shape": [2], "data_offsets": {"0": 0}}}),
        "offsets negative": pack({"a": t("U8", [0], -1, -1)}),
        "offsets reversed": pack({"a": t("U8", [2], 2, 0)}, b"xy"),
        "offsets huge": pack({"a": t("U8", [2], 2**64 - 2, 2**64)}, b"xy"),
        "size mismatch": pack({"a": t("F32", [2], 0, 4)}, b"xyzw"),
        "f4 odd": pack({"a": t("F4", [3], 0, 1)}, b"x"),
        "f6 four": pack({"a": t("F6_E2M3", [4], 0, 3)}, b"xyz"),
        "gap at start": pack({"a": t("U8", [2], 1, 3)}, b"xyz"),
        "gap between": pack({"a": t("U8", [1], 0, 1), "b": t("U8", [1], 2, 3)}, b"xyz"),
        "overlap": pack({"a": t("U8", [2], 0, 2), "b": t("U8", [2], 1, 3)}, b"xyz"),
        "same range": pack({"a": t("U8", [2], 0, 2), "b": t("U8", [2], 0, 2)}, b"xy"),
        "empty inside other": pack({"a": t("U8", [2], 0, 2), "b": t("U8", [0], 1, 1)}, b"xy"),
        "empty at end": pack({"a": t("U8", [2], 0, 2), "b": t("U8", [0], 2, 2)}, b"xy"),
        "empty past end": pack({"a": t("U8", [2], 0, 2), "b": t("U8", [0], 3, 3)}, b"xy"),
        "many empty": pack({k: t("I64", [0, 5], 0, 0) for k in "pqrs"}),
        "reverse order": pack({"b": t("U8", [1], 1, 2), "a": t("U8", [1], 0, 1)}, b"xy"),
        "past end": pack({"a": t("U8", [3], 0, 3)}, b"xy"),
        "trailing bytes": pack({"a": t("U8", [2], 0, 2)}, b"xyz"),
        "data without tensors": pack("{}", b"x"),
        "deep nesting": pack('{"a":' + "[" * 500 + "]" * 500 + "}"),
        "deep nesting in metadata": pack('{"__metadata__":{"k":' + "[" * 200 + "]" * 200 + "}}"),
        "tensor named __metadata__ string": pack('{"__metadata__":"x"}'),
    }
    return cases


def mutated_cases(files):
    cases = {}
    small = files["small"]
    header, data = split(small)
    for n in range(len(small)):
        cases[f"small truncated to {n}"] = small[:n]
    for i in range(8, 8 + len(header)):
        cases[f"small byte {i} xor 0x01"] = small[:i] + bytes([small[i] ^ 0x01]) + small[i + 1 :]
        if i % 5 == 0:
            flipped = small[:i] + bytes([small[i] ^ 0x80]) + small[i + 1 :]
            cases[f"small byte {i} xor 0x80"] = flipped
    for name in ("numpy", "torch"):
        blob = files[name]
        (n,) = struct.unpack("<Q", blob[:8])
        for cut in range(0, len(blob), 37):
            cases[f"{name} truncated to {cut}"] = blob[:cut]
        cases[f"{name} extra byte"] = blob + b"\0"
        cases[f"{name} extra 8 bytes"] = blob + bytes(8)
        cases[f"{name} length +1"] = struct.pack("<Q", n + 1) + blob[8:]
        cases[f"{name} length -1"] = struct.pack("<Q", n - 1) + blob[8:]
    rng = random.Random(20240601)
    for k in range(300):
        base = files[rng.choice(["numpy", "torch", "small"])]
        (n,) = struct.unpack("<Q", base[:8])
        blob = bytearray(base)
        for _ in range(rng.randint(1, 3)):
            # Mostly the header: data bytes keep a file valid and only test that bytes match.
            pos = rng.randrange(8, 8 + n) if rng.random() < 0.8 else rng.randrange(len(blob))
            blob[pos] = rng.choice([rng.randrange(256), ord(rng.choice('{}[]",:0123456789 -'))])
        cases[f"random mutation {k}"] = bytes(blob)
    for k in range(40):
        base = files[rng.choice(["numpy", "torch"])]
        (n,) = struct.unpack("<Q", base[:8])
        blob = bytearray(base)
        pos = rng.randrange(8 + n, len(blob))
        blob[pos] ^= rng.randrange(1, 256)
        cases[f"data mutation {k}"] = bytes(blob)
    # Edits of the parsed header: near misses that stay valid JSON.
    dtypes = ["BOOL", "U8", "I8", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32",
              "F64", "I64", "U64", "C64", "F4", "F6_E3M2"]
    for k in range(150):
        base = files[rng.choice(["numpy", "torch", "small"])]
        header_bytes, data = split(base)
        header = json.loads(header_bytes)
        name = rng.choice([key for key in header if key != "__metadata__"])
        entry = header[name]
        what = rng.randrange(6)
        if what == 0:
            entry["data_offsets"][rng.randrange(2)] += rng.choice([-1, 1])
        elif what == 1 and entry["shape"]:
            entry["shape"][rng.randrange(len(entry["shape"]))] += rng.choice([-1, 1])
        elif what == 2:
            entry["dtype"] = rng.choice(dtypes)
        elif what == 3:
            del header[name]
        elif what == 4:
            entry["shape"] = entry["shape"] + [1] if rng.random() < 0.5 else entry["shape"][:-1]
        else:
            shift = rng.choice([-1, 1])
            for key, e in header.items():
                if key != "__metadata__":
                    e["data_offsets"] = [e["data_offsets"][0] + shift, e["data_offsets"][1] + shift]
        text = json.dumps(header, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        cases[f"header edit {k} (kind {what})"] = pack(text, data)
    return cases


def reference_verdict(path, blob):
    """(tensors, metadata, None) if the reference accepts the file, else (None, None, error)."""
    try:
        items = safetensors.deserialize(blob)
    except Exception as e:  # the reference raises SafetensorError (and others for odd input)
        err = f"{type(e).__name__}: {e}"
        try:
            with safe_open(path, framework="numpy"):
                pass
        except Exception:
            return None, None, err
        raise AssertionError(f"{path}: deserialize refuses ({err}) but safe_open accepts")
    tensors = {
        name: {"dtype": v["dtype"], "shape": list(v["shape"]), "hex": bytes(v["data"]).hex()}
        for name, v in items
    }
    with safe_open(path, framework="numpy") as f:  # must agree, and it reports the metadata
        assert sorted(f.keys()) == sorted(tensors), path
        metadata = f.metadata() or {}
    return tensors, metadata, None


def run_tool(tool, paths):
    out = subprocess.run(
        [str(tool), "check", *map(str, paths)], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, f"safetensors_tool exited {out.returncode}: {out.stderr}"
    lines = out.stdout.splitlines()
    assert len(lines) == len(paths), out.stdout[-2000:]
    return [json.loads(line) for line in lines]


def test_normlab_agrees_with_reference(tool, tmp_path):
    files = reference_files()
    cases = {f"valid {k}": v for k, v in files.items()}
    cases.update(handmade_cases())
    cases.update(mutated_cases(files))
    assert len(cases) > 500

    paths = []
    for i, blob in enumerate(cases.values()):
        path = tmp_path / f"case{i:04d}.safetensors"
        path.write_bytes(blob)
        paths.append(path)
    results = run_tool(tool, paths)

    counts = {"both refuse": 0, "both accept": 0}
    stricter = {}
    problems = []
    for (label, blob), path, got in zip(cases.items(), paths, results):
        ref, ref_meta, ref_err = reference_verdict(str(path), blob)
        if not got["ok"] and got["kind"] != "FormatError":
            problems.append(f"{label}: normlab failed with a {got['kind']} error: {got['error']}")
        elif ref is None:
            if got["ok"]:
                problems.append(f"{label}: normlab accepts a file the reference refuses: {ref_err}")
            else:
                counts["both refuse"] += 1
        elif not got["ok"]:
            why = [w for w, pattern in STRICTER if re.search(pattern, got["error"])]
            if why:
                stricter.setdefault(why[0], []).append(label)
            else:
                problems.append(f"{label}: reference accepts, normlab refuses: {got['error']}")
        elif got["tensors"] != ref or got["metadata"] != ref_meta:
            problems.append(f"{label}: normlab reads {got}, the reference {ref} {ref_meta}")
        else:
            counts["both accept"] += 1

    print(f"\n{len(cases)} files: {counts}; normlab stricter: "
          + "; ".join(f"{w}: {len(v)} ({', '.join(v[:3])})" for w, v in stricter.items()))
    assert not problems, "\n".join(problems[:30])
    must_accept = ["valid numpy", "valid torch", "valid small", "valid f4", "many empty",
                   "reverse order", "empty at end", "escaped pair", "space padding",
                   "pretty header"]
    for label in must_accept:
        assert results[list(cases).index(label)]["ok"], label
    # The hand-made cases for the stricter rules hit exactly those rules.
    stricter_cases = ["dup tensor identical", "dup tensor via escape", "dup metadata key",
                      "extra field", "empty name", "metadata null", "leading space",
                      "shape u64 max then zero", "entry array", "dtype as map"]
    for label in stricter_cases:
        assert any(label in v for v in stricter.values()), (label, stricter)


def test_reference_files_read_with_framework_loaders(tool, tmp_path):
    """Values seen through numpy/torch (what users of the reference get) match normlab's bytes."""
    files = reference_files()
    paths = []
    for name in ("numpy", "torch"):
        paths.append(tmp_path / f"{name}.safetensors")
        paths[-1].write_bytes(files[name])
    got_np, got_pt = run_tool(tool, paths)
    assert got_np["ok"] and got_pt["ok"]

    from safetensors.numpy import load as np_load
    from safetensors.torch import load as pt_load

    for name, array in np_load(files["numpy"]).items():
        t = got_np["tensors"][name]
        assert t["shape"] == list(array.shape), name
        assert bytes.fromhex(t["hex"]) == np.ascontiguousarray(array).tobytes(), name
    for name, tensor in pt_load(files["torch"]).items():
        t = got_pt["tensors"][name]
        assert t["shape"] == list(tensor.shape), name
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        assert bytes.fromhex(t["hex"]) == raw, name
    assert got_np["tensors"]["f16"]["dtype"] == "F16"
    assert got_pt["tensors"]["bf16"]["dtype"] == "BF16"
    assert got_np["metadata"] == {"format": "np", "note": "ünïcode ✓"}


def test_files_written_by_normlab_read_back_through_reference(tool, tmp_path):
    for name, blob in reference_files().items():
        src = tmp_path / f"{name}.safetensors"
        dst = tmp_path / f"{name}.copy.safetensors"
        src.write_bytes(blob)
        out = subprocess.run(
            [str(tool), "copy", str(src), str(dst)], capture_output=True, text=True, timeout=60
        )
        assert out.returncode == 0, out.stderr
        written = dst.read_bytes()
        header, _ = split(written)
        assert len(header) % 8 == 0 and header[:1] == b"{", name
        expected = reference_verdict(str(src), blob)[:2]
        assert reference_verdict(str(dst), written)[:2] == expected, name
    assert sorted(p.name for p in tmp_path.iterdir() if ".tmp." in p.name) == []
