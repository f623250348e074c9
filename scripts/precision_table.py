#!/usr/bin/env python3
"""Finding 9's tables (docs/findings.md): float32 against bf16 matrix products, side by side.

    python3 scripts/precision_table.py FP32_DIR BF16_DIR [--seed SEED_DIR] [--sweep SWEEP_DIR]

FP32_DIR and BF16_DIR are `normlab compare --out` directories (one run per placement, same seeds);
SEED_DIR, when given, is float32 again with another train.seed: the seed-to-seed spread that a
precision difference is measured against. SWEEP_DIR is a `normlab sweep` whose grid has
train.matmul_precision and optim.lr. Reads only the runs' own files (metrics.jsonl, sweep.json);
prints Markdown. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys


def records(run):
    steps, end = [], None
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            r = json.loads(line)
            if r.get("event") == "end":
                end = r
            elif "event" not in r:
                steps.append(r)
    return steps, end


def last_with(steps, key):
    for r in reversed(steps):
        if r.get(key) is not None:
            return r
    return None


def runs_of(d):
    return sorted(x for x in os.listdir(d)
                  if os.path.exists(os.path.join(d, x, "metrics.jsonl")))


def window_means(steps, key, width):
    """{window end step: mean of key over the steps in (end - width, end]}"""
    out = {}
    for r in steps:
        if r.get(key) is None:
            continue
        w = (r["step"] - 1) // width
        out.setdefault(w, []).append(r[key])
    return {(w + 1) * width: sum(v) / len(v) for w, v in out.items()}


def curve_gap(a, b, width=100):
    """Largest |difference| of the loss averaged over windows of `width` steps, and where."""
    wa, wb = window_means(a, "loss", width), window_means(b, "loss", width)
    common = sorted(set(wa) & set(wb))
    if not common:
        return None, None
    k = max(common, key=lambda s: abs(wa[s] - wb[s]))
    return wa[k] - wb[k], k


def diag(steps):
    r = last_with(steps, "attn_max_logit")
    if not r:
        return None
    return {"step": r["step"], "attn": max(r["attn_max_logit"]), "log_z": r.get("log_z_mean"),
            "resid_last": r["resid_rms"][-1] if r.get("resid_rms") else None,
            "resid_max": max(r["resid_rms"]) if r.get("resid_rms") else None,
            "gn_layers": r.get("grad_norm_block") or [], "max_logit": r.get("max_logit")}


def rel(x, y):
    return abs(x - y) / max(abs(y), 1e-12)


def fmt(x, nd=4):
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{nd}f}"


def full_tables(fp, bf, seed):
    names = [n for n in runs_of(fp) if os.path.isdir(os.path.join(bf, n))]
    print("### Full-length runs: float32 vs bf16" + (" (and float32 with another seed)" if seed else "") + "\n")
    head = ("| run | steps | val loss fp32 | val loss bf16 | bf16 - fp32 |"
            + (" other seed - fp32 |" if seed else "")
            + " train loss fp32 / bf16 | largest gap of the 100-step mean loss, bf16 - fp32 (at step) |"
            + (" same, other seed - fp32 |" if seed else ""))
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    rows = []
    for n in names:
        a, ea = records(os.path.join(fp, n))
        b, eb = records(os.path.join(bf, n))
        s, es = records(os.path.join(seed, n)) if seed and os.path.isdir(os.path.join(seed, n)) else (None, None)
        va, vb = ea.get("val_loss") if ea else None, eb.get("val_loss") if eb else None
        vs = es.get("val_loss") if es else None
        gap, at = curve_gap(a, b)
        sg, sat = curve_gap(a, s) if s else (None, None)
        line = (f"| {n} | {a[-1]['step'] if a else 'n/a'} | {fmt(va)} | {fmt(vb)} | "
                f"{(vb - va):+.4f} |" if va is not None and vb is not None else
                f"| {n} | {a[-1]['step'] if a else 'n/a'} | {fmt(va)} | {fmt(vb)} | n/a |")
        if seed:
            line += f" {(vs - va):+.4f} |" if vs is not None and va is not None else " n/a |"
        line += (f" {fmt(ea.get('train_loss') if ea else None)} / {fmt(eb.get('train_loss') if eb else None)} |"
                 f" {gap:+.4f} ({at}) |" if gap is not None else " n/a | n/a |")
        if seed:
            line += f" {sg:+.4f} ({sat}) |" if sg is not None else " n/a |"
        print(line)
        rows.append((n, a, b, s))
    print()
    print("### Diagnostics at the last diagnostics step\n")
    head = ("| run | step | max attention logit fp32 / bf16 | mean log Z fp32 / bf16 | final residual RMS "
            "fp32 / bf16 | largest residual RMS fp32 / bf16 | gradient norm by layer: largest relative "
            "difference bf16 vs fp32 |" + (" same, other seed vs fp32 |" if seed else ""))
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for n, a, b, s in rows:
        da, db = diag(a), diag(b)
        if not da or not db:
            print(f"| {n} | n/a (no diagnostics) |")
            continue
        gl = max((rel(x, y) for x, y in zip(db["gn_layers"], da["gn_layers"])), default=None)
        line = (f"| {n} | {da['step']} | {da['attn']:.2f} / {db['attn']:.2f} | {fmt(da['log_z'], 3)} / "
                f"{fmt(db['log_z'], 3)} | {fmt(da['resid_last'], 3)} / {fmt(db['resid_last'], 3)} | "
                f"{fmt(da['resid_max'], 3)} / {fmt(db['resid_max'], 3)} | "
                f"{100 * gl:.1f}% |" if gl is not None else " n/a |")
        if seed:
            ds = diag(s) if s else None
            gs = max((rel(x, y) for x, y in zip(ds["gn_layers"], da["gn_layers"])), default=None) if ds else None
            line += f" {100 * gs:.1f}% |" if gs is not None else " n/a |"
        print(line)
    print()
    # The diagnostics over the whole run: the largest relative gap between the precisions' series.
    print("### Diagnostics over the run: largest relative difference bf16 vs fp32 over all "
          "diagnostics steps" + (" (other seed vs fp32 beside it)" if seed else "") + "\n")
    keys = [("attn", "max attention logit"), ("log_z", "mean log Z"), ("resid_max", "largest residual RMS")]
    print("| run | " + " | ".join(k[1] for k in keys) + " |")
    print("|---|" + "---|" * len(keys))
    for n, a, b, s in rows:
        def series(steps):
            out = {}
            for r in steps:
                if r.get("attn_max_logit"):
                    out[r["step"]] = {"attn": max(r["attn_max_logit"]), "log_z": r.get("log_z_mean"),
                                      "resid_max": max(r["resid_rms"]) if r.get("resid_rms") else None}
            return out
        sa, sb = series(a), series(b)
        ss = series(s) if s else {}
        cells = []
        for k, _ in keys:
            def gap(x):
                vals = [rel(x[t][k], sa[t][k]) for t in sorted(set(sa) & set(x))
                        if x[t][k] is not None and sa[t][k] is not None]
                return max(vals) if vals else None
            g1, g2 = gap(sb), gap(ss) if ss else None
            cells.append((f"{100 * g1:.1f}%" if g1 is not None else "n/a")
                         + (f" (seed: {100 * g2:.1f}%)" if g2 is not None else ""))
        print(f"| {n} | " + " | ".join(cells) + " |")
    print()


def sweep_tables(d):
    with open(os.path.join(d, "sweep.json")) as f:
        sw = json.load(f)
    print("### Learning-rate sweep in both precisions\n")
    sens = sw.get("sensitivity", [])
    lrs = sens[0]["lrs"] if sens else []
    print("| variant | sensitivity | best lr | best loss | " + " | ".join(f"lr {x:.3g}" for x in lrs) + " |")
    print("|---|---|---|---|" + "---|" * len(lrs))
    for v in sens:
        cells = []
        for L, div in zip(v["final_losses"], v["diverged"]):
            cells.append(("diverged" if div else "") + ("" if L is None else (" " if div else "") + f"{L:.4f}"))
        print(f"| {v['label']} | {fmt(v['sensitivity'])} | {v['best_lr']:.3g} | {fmt(v['best_loss'])} | "
              + " | ".join(cells) + " |")
    print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("fp32")
    ap.add_argument("bf16")
    ap.add_argument("--seed", help="float32 with another train.seed (compare --out directory)")
    ap.add_argument("--sweep")
    a = ap.parse_args()
    full_tables(a.fp32, a.bf16, a.seed)
    if a.sweep:
        sweep_tables(a.sweep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
