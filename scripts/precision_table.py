#!/usr/bin/env python3
"""Finding 9's tables (docs/findings.md): float32 against bf16 matrix products, side by side.

    python3 scripts/precision_table.py LABEL=DIR ... [--sweep SWEEP_DIR]

Each DIR is a `normlab compare --out` directory (one run per placement); the labels name the
precision and seed, e.g. float32=full/float32 bf16=full/bf16 float32_seed7=full/float32_seed7
bf16_seed7=full/bf16_seed7. Differences are shown for every pair of labels that differ only in
the precision (float32 vs bf16 at one seed) and every pair that differs only in the seed (the
seed-to-seed spread a precision difference is measured against). SWEEP_DIR is a `normlab sweep`
whose grid has train.matmul_precision and optim.lr. Reads only the runs' own files (metrics.jsonl,
sweep.json); prints Markdown. Standard library only.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import statistics
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
    return steps, end or {}


def fmt(x, nd=4):
    """nd decimals; nd = None: 3 significant digits (for values that span decades)"""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{x:.3g}" if nd is None else f"{x:.{nd}f}"


def summary(run):
    """The numbers a stability study reads off a run: final val loss, train loss, and each
    diagnostic's mean over the second half of training (with its largest value over the run)."""
    steps, end = records(run)
    last = steps[-1]["step"] if steps else 0
    diag = [r for r in steps if r.get("attn_max_logit")]
    half = [r for r in diag if r["step"] > last / 2]

    def mean(f, rs=half):
        v = [f(r) for r in rs if f(r) is not None]
        return statistics.mean(v) if v else None

    def peak(f):
        v = [f(r) for r in diag if f(r) is not None]
        return max(v) if v else None

    attn = lambda r: max(r["attn_max_logit"])  # noqa: E731
    resid = lambda r: max(r["resid_rms"]) if r.get("resid_rms") else None  # noqa: E731
    gn = [r["grad_norm_block"] for r in half if r.get("grad_norm_block")]
    return {
        "steps": last,
        "val": end.get("val_loss"),
        "train": end.get("train_loss"),
        "attn": mean(attn), "attn_peak": peak(attn),
        "log_z": mean(lambda r: r.get("log_z_mean")),
        "resid": mean(resid), "resid_peak": peak(resid),
        # gradient norm of the first and of the last block over the second half (means)
        "gn_first": statistics.mean(g[0] for g in gn) if gn else None,
        "gn_last": statistics.mean(g[-1] for g in gn) if gn else None,
        "grad_norm": mean(lambda r: r.get("grad_norm"), [r for r in steps if r["step"] > last / 2]),
    }


KEYS = [("val", "final val loss", 4), ("train", "train loss (last 20 steps)", 4),
        ("attn", "max attention logit", 1), ("log_z", "mean log Z", 3),
        ("resid", "largest residual RMS", 3), ("gn_first", "grad norm, block 0", None),
        ("gn_last", "grad norm, last block", None), ("grad_norm", "global grad norm", None)]


def split(label):
    """'bf16_seed7' -> ('bf16', 'seed7'); 'float32' -> ('float32', '')"""
    prec, _, seed = label.partition("_")
    return prec, seed


def full_tables(dirs):
    labels = list(dirs)
    # A placement may be missing from some directories (finding 9 runs Post-Norm's second bf16
    # seed not at all): its rows and pairs are left out there.
    placements = sorted(set.union(*[
        {x for x in os.listdir(d) if os.path.exists(os.path.join(d, x, "metrics.jsonl"))}
        for d in dirs.values()]))
    S = {(pl, lb): summary(os.path.join(dirs[lb], pl)) for pl in placements for lb in labels
         if os.path.exists(os.path.join(dirs[lb], pl, "metrics.jsonl"))}
    print("### Full-length runs, side by side\n")
    print("Diagnostics: mean over the second half of training (diagnostics every 50 steps); in "
          "brackets the largest value over the whole run.\n")
    print("| placement | run | steps | " + " | ".join(k[1] for k in KEYS) + " |")
    print("|---|---|---|" + "---|" * len(KEYS))
    for pl in placements:
        for lb in labels:
            if (pl, lb) not in S:
                continue
            s = S[(pl, lb)]
            cells = []
            for k, _, nd in KEYS:
                c = fmt(s[k], nd)
                if k in ("attn", "resid") and s[k + "_peak"] is not None:
                    c += f" ({fmt(s[k + '_peak'], nd)})"
                cells.append(c)
            print(f"| {pl} | {lb} | {s['steps']} | " + " | ".join(cells) + " |")
    print()
    # Pairs that differ in one thing only.
    prec_pairs = [(a, b) for a in labels for b in labels
                  if split(a)[1] == split(b)[1] and split(a)[0] == "float32" and split(b)[0] == "bf16"]
    seed_pairs = [(a, b) for a in labels for b in labels
                  if split(a)[0] == split(b)[0] and split(a)[1] == "" and split(b)[1] != ""]
    print("### Differences: precision (bf16 - float32, same seed) against seed (other seed - "
          "seed 1337, same precision)\n")
    print("Relative differences for the diagnostics, absolute for the losses.\n")
    print("| placement | pair | " + " | ".join(k[1] for k in KEYS) + " |")
    print("|---|---|" + "---|" * len(KEYS))
    for pl in placements:
        for kind, pairs in (("precision", prec_pairs), ("seed", seed_pairs)):
            for a, b in pairs:
                if (pl, a) not in S or (pl, b) not in S:
                    continue
                sa, sb = S[(pl, a)], S[(pl, b)]
                cells = []
                for k, _, nd in KEYS:
                    if sa[k] is None or sb[k] is None:
                        cells.append("n/a")
                    elif k in ("val", "train"):
                        cells.append(f"{sb[k] - sa[k]:+.4f}")
                    else:
                        cells.append(f"{100 * (sb[k] - sa[k]) / abs(sa[k]):+.0f}%")
                print(f"| {pl} | {kind}: {b} - {a} | " + " | ".join(cells) + " |")
    print()


def sweep_tables(d):
    with open(os.path.join(d, "sweep.json")) as f:
        sw = json.load(f)
    print("### Learning-rate sweep in both precisions\n")
    sens = sw.get("sensitivity", [])
    lrs = sens[0]["lrs"] if sens else []
    print("| variant | sensitivity | best lr | best loss | " + " | ".join(f"lr {x:.3g}" for x in lrs) + " |")
    print("|---|---|---|---|" + "---|" * len(lrs))
    runs = sw.get("runs", [])
    status = {}  # (variant overrides without the lr, lr) -> run
    for r in runs:
        key = tuple(sorted((k, v) for k, v in r["overrides"].items() if k != sw["lr_key"]))
        status[(key, float(r["overrides"][sw["lr_key"]]))] = r
    for v in sens:
        key = tuple(sorted(v["variant"].items()))
        cells = []
        for lr, L in zip(v["lrs"], v["final_losses"]):
            r = status.get((key, float(lr)), {})
            div = r.get("status") == "diverged"
            cells.append(("div " if div else "") + ("n/a" if L is None else f"{L:.4f}"))
        best_lr = f"{v['best_lr']:.3g}" if v.get("best_lr") is not None else "n/a"
        print(f"| {v['label']} | {fmt(v['sensitivity'])} | {best_lr} | {fmt(v['best_loss'])} | "
              + " | ".join(cells) + " |")
    print()
    # Largest attention logit at the end of each sweep run, by precision.
    if runs and any(r.get("max_attn_logit") is not None for r in runs):
        print("Largest attention logit at the end of each sweep run:\n")
        keys = sorted({k for r in runs for k in r["overrides"] if k != sw["lr_key"]})
        rows = {}
        for r in runs:
            key = tuple(f"{k.split('.')[-1]}={r['overrides'][k]}" for k in keys)
            rows.setdefault(key, {})[float(r["overrides"][sw["lr_key"]])] = r.get("max_attn_logit")
        print("| variant | " + " | ".join(f"lr {x:.3g}" for x in lrs) + " |")
        print("|---|" + "---|" * len(lrs))
        for key, by_lr in rows.items():
            print(f"| {', '.join(key)} | "
                  + " | ".join(fmt(by_lr.get(x), 1) for x in lrs) + " |")
        print()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="LABEL=DIR (a compare --out directory)")
    ap.add_argument("--sweep")
    a = ap.parse_args()
    dirs = {}
    for x in a.runs:
        label, _, d = x.partition("=")
        if not d:
            ap.error(f"{x}: expected LABEL=DIR")
        dirs[label] = d
    full_tables(dirs)
    if a.sweep:
        sweep_tables(a.sweep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
