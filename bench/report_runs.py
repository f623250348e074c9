"""bench/report.py's input: the JSON results of bench/run.sh read by kind, config and round, the
CPU they ran on, and per config the row the report's tables show (medians over rounds, the GEMM
rates, MFU per round against a GEMM rate of the same round). Also the number formatting the
tables share (fmt, ratio_of).
"""
from __future__ import annotations

import glob
import json
import os
import re
import statistics
import sys

import cpuinfo  # bench/cpuinfo.py (report.py puts bench/ on the path)

IMPLS = [("normlab", "normlab"), ("normlab_bf16", "normlab bf16"), ("eager", "torch eager"),
         ("compile", "torch.compile"), ("autocast", "torch autocast bf16 eager"),
         ("autocast_compile", "torch autocast bf16 compile")]
# Kinds that older results (or AUTOCAST=0 / COMPILE=0) may lack: their rows are left out then.
OPTIONAL = ("normlab_bf16", "autocast", "autocast_compile")


def load(results):
    """{(kind, config): [result of round 1, round 2, ...]} in round order."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        # normlab_bf16 before normlab, or "normlab_bf16_a" would read as config "bf16_a" (and
        # autocast_compile before autocast)
        m = re.match(r"(sgemm_skx|sgemm|normlab_bf16|normlab|eager|compile|autocast_compile|autocast)"
                     r"_(\w+?)_r(\d+)\.json$",
                     os.path.basename(path))
        if not m:
            continue
        kind, cfg, rnd = m.groups()
        try:
            with open(path) as f:
                text = f.read().strip().splitlines()
            j = json.loads(text[-1]) if text else {"error": "no output"}
        except (OSError, ValueError) as e:
            j = {"error": f"unreadable result: {e}"}
        j["_round"] = int(rnd)
        runs.setdefault((kind, cfg), []).append(j)
    for v in runs.values():
        v.sort(key=lambda j: j["_round"])
    return runs


def best_sgemm(*results):
    vals = [r.get(k) for r in results if r and "error" not in r
            for k in ("blas_gflops", "normlab_gemm_gflops", "dnnl_gflops")]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def med(runs, key):
    vals = [r[key] for r in runs if key in r and r.get(key) is not None and "error" not in r]
    return statistics.median(vals) if vals else None


def first_error(runs):
    for r in runs:
        if "error" in r:
            return r["error"]
    return None


def fmt(x, nd=0, unit=""):
    if x is None:
        return "n/a"
    return f"{x:,.{nd}f}{unit}"


def load_cpu(results):
    """The CPU of the run: the results' cpu.json (run.sh), else this machine (bench/cpuinfo.py)."""
    path = os.path.join(results, "cpu.json") if results else None
    if path and os.path.exists(path):
        try:
            with open(path) as f:
                info = json.load(f)
            info.setdefault("generation", cpuinfo.generation(info.get("vendor"), info.get("family"),
                                                             info.get("model"), info.get("flags")))
            info.setdefault("key", cpuinfo.cpu_key(info))
            return info, "cpu.json"
        except (OSError, ValueError) as e:
            print(f"report.py: {path} unreadable ({e}); reading this machine's CPU", file=sys.stderr)
    return cpuinfo.collect(), "read when the report was made"


def ratio_of(x, y):
    return x / y if x and y else None


def mfu_per_round(train, rate):
    """[model GFLOP/s over rate(round)] for each training run that succeeded, in round order;
    rounds without a rate are left out."""
    out = []
    for x in train:
        if "error" in x or not x.get("gflops"):
            continue
        b = rate(x["_round"])
        if b:
            out.append(x["gflops"] / b)
    return out


def compute_rows(runs, configs):
    rows, details = [], []
    # one BLAS label for every config, so that the sgemm table's columns line up
    blas_label = next((x["blas"] for (kind, _), v in runs.items() if kind == "sgemm" for x in v
                       if x.get("blas")), "OpenBLAS")
    for c in configs:
        nl = runs.get(("normlab", c), [])
        nb = runs.get(("normlab_bf16", c), [])
        r = {"config": c}
        for kind, _ in IMPLS:
            rr = runs.get((kind, c), [])
            r[kind] = {"tok": med(rr, "tokens_per_s"), "ms": med(rr, "step_ms_median"),
                       "rss": med(rr, "peak_rss_mb"), "err": first_error(rr),
                       "base": (med(rr, "baseline_rss_mb") if kind.startswith("normlab")
                                else med(rr, "imported_rss_mb")),
                       "per_round": [x.get("tokens_per_s") for x in rr],
                       "first": med(rr, "first_step_ms"),
                       "loss_last": med(rr, "loss_last"),
                       "losses": next((x["losses"] for x in rr if x.get("losses")), None),
                       "raw": [x for x in rr if "error" not in x],
                       "steps": sorted({(x.get("steps"), x.get("warmup")) for x in rr
                                        if "error" not in x and x.get("steps") is not None}),
                       "ran": bool(rr)}
        sg = runs.get(("sgemm", c), [])
        sk = runs.get(("sgemm_skx", c), [])
        rates = {blas_label + " (as linked)": med(sg, "blas_gflops"),
                 "OpenBLAS (core SkylakeX, forced)": med(sk, "blas_gflops"),
                 "normlab gemm": med(sg, "normlab_gemm_gflops")}
        if med(sg, "dnnl_gflops"):
            rates["oneDNN sgemm"] = med(sg, "dnnl_gflops")
        if med(sg, "normlab_bf16_gflops"):  # bf16 inputs: not part of the MFU's best rate
            rates["normlab gemm_bf16 (bf16 inputs)"] = med(sg, "normlab_bf16_gflops")
        r["rates"] = rates
        r["gflops"] = med(nl, "gflops")
        r["gflops_bf16"] = med(nb, "gflops")
        # MFU per round, against a GEMM rate of the same round (measured minutes apart, not hours),
        # then the median over rounds. float32: the best sgemm; bf16: normlab's gemm_bf16 (the
        # sgemm run's normlab_bf16_gflops).
        by_round = {x["_round"]: x for x in sg}
        by_round_skx = {x["_round"]: x for x in sk}

        def bf16_rate(k):
            s = by_round.get(k)
            return s.get("normlab_bf16_gflops") if s and "error" not in s else None

        r["mfu_rounds"] = mfu_per_round(
            nl, lambda k: best_sgemm(by_round.get(k), by_round_skx.get(k)))
        r["mfu"] = statistics.median(r["mfu_rounds"]) if r["mfu_rounds"] else None
        r["mfu_bf16_rounds"] = mfu_per_round(nb, bf16_rate)
        r["mfu_bf16"] = statistics.median(r["mfu_bf16_rounds"]) if r["mfu_bf16_rounds"] else None
        r["bf16_rate"] = med(sg, "normlab_bf16_gflops")
        bests = [b for b in (best_sgemm(by_round.get(k), by_round_skx.get(k))
                             for k in sorted(set(by_round) | set(by_round_skx))) if b]
        r["best"] = statistics.median(bests) if bests else None
        r["desc"] = nl[0].get("description") if nl and "description" in nl[0] else ""
        r["flops_per_token"] = med(nl, "flops_per_token")
        r["split"] = {k: med(nl, k + "_ms_median") for k in ("forward", "backward", "optimizer")}
        r["cpu_ms"] = med(nl, "cpu_ms_median")
        rows.append(r)
        details.append((c, sg))
    return rows, details
