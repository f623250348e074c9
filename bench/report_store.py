"""The per-CPU store of bench/report.py: one record per CPU (bench/results/<cpu key>.json) that
sums up a run (summarise), which stored record a new one replaces, and reading and writing the
store.
"""
from __future__ import annotations

import glob
import json
import os
import sys

from report_runs import IMPLS, ratio_of

STORE_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def rnd(x, nd):
    return None if x is None else round(x, nd)


def summarise(rows):
    """Per config, what the per-CPU store keeps: medians over rounds, ratios of those medians,
    MFU with its per-round values, the GEMM rates, and the error of a kind that never succeeded."""
    out = {}
    for r in rows:
        if not any(r[kind]["ran"] for kind, _ in IMPLS):
            continue  # a config this run did not measure
        tok = {name: r[kind]["tok"] for kind, name in (
            ("normlab", "normlab_fp32"), ("normlab_bf16", "normlab_bf16"), ("eager", "eager"),
            ("compile", "compile"), ("autocast", "autocast_eager"),
            ("autocast_compile", "autocast_compile"))}
        ratios = {
            "fp32_vs_eager": ratio_of(tok["normlab_fp32"], tok["eager"]),
            "fp32_vs_compile": ratio_of(tok["normlab_fp32"], tok["compile"]),
            "bf16_vs_autocast_eager": ratio_of(tok["normlab_bf16"], tok["autocast_eager"]),
            "bf16_vs_autocast_compile": ratio_of(tok["normlab_bf16"], tok["autocast_compile"]),
            "bf16_vs_fp32": ratio_of(tok["normlab_bf16"], tok["normlab_fp32"]),
        }
        errors = {kind: r[kind]["err"] for kind, _ in IMPLS if r[kind]["err"] and not r[kind]["tok"]}
        out[r["config"]] = {
            "tok_s": {k: rnd(v, 1) for k, v in tok.items()},
            "ratios": {k: rnd(v, 4) for k, v in ratios.items()},
            "mfu_fp32": rnd(r["mfu"], 4),
            "mfu_fp32_rounds": [round(m, 4) for m in r["mfu_rounds"]],
            "mfu_bf16": rnd(r["mfu_bf16"], 4),
            "mfu_bf16_rounds": [round(m, 4) for m in r["mfu_bf16_rounds"]],
            "gflops": {"fp32": rnd(r["gflops"], 1), "bf16": rnd(r["gflops_bf16"], 1)},
            "sgemm_best_gflops": rnd(r["best"], 1),
            "gemm_bf16_gflops": rnd(r["bf16_rate"], 1),
            "errors": errors,
        }
        kernel = next((x.get("bf16_kernel") for x in r["normlab_bf16"]["raw"] if x.get("bf16_kernel")),
                      None)
        if kernel:  # which kernel normlab bf16 ran (AVX512-BF16, or the float32 one on rounded copies)
            out[r["config"]]["bf16_kernel"] = kernel
    return out


def supersedes(new, old):
    """Whether the record `new` replaces the stored `old`: the same CPU key, or an older record
    whose CPU model was not known (transcribed) with the same vendor, family and model name."""
    n, o = new["cpu"], old.get("cpu", {})
    if n.get("key") and n.get("key") == o.get("key"):
        return True
    return (o.get("model") is None and n.get("model") is not None
            and all(n.get(k) == o.get(k) and o.get(k) is not None
                    for k in ("vendor", "family", "model_name")))


def read_store(store):
    """[(path, record)] of every per-CPU file in the store."""
    recs = []
    for path in sorted(glob.glob(os.path.join(store, "*.json"))):
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            print(f"report.py: skipping {path}: {e}", file=sys.stderr)
            continue
        if isinstance(rec, dict) and "cpu" in rec and "configs" in rec:
            recs.append((path, rec))
    return recs


def write_store(store, record):
    """Writes <key>.json and removes the files the record supersedes; returns the path."""
    os.makedirs(store, exist_ok=True)
    path = os.path.join(store, record["cpu"]["key"] + ".json")
    for old_path, old in read_store(store):
        if os.path.abspath(old_path) != os.path.abspath(path) and supersedes(record, old):
            os.remove(old_path)
            print(f"report.py: {record['cpu']['key']} replaces {os.path.basename(old_path)}",
                  file=sys.stderr)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path
