#!/usr/bin/env python3
"""The table of finding 13's initial-scale arms (docs/findings.md) from the sweeps
scripts/findings_dyt_init.sh wrote under OUT_DIR/norm_free/dyt_init (ab, c, d): per arm (model.init_std,
model.embed_init_std), the final val loss over the seeds (mean ± std, each seed), and at the last
diagnostics record the saturated fraction of each DyT site (`dyt_saturated`, mean over seeds), the
number of sites saturated fully (>= 0.99) and not at all (<= 0.01) per seed, and the residual
stream's largest RMS. Markdown on stdout.

    python3 scripts/findings_dyt_init_tables.py runs/findings
"""
import json
import math
import pathlib
import statistics
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/findings") / "norm_free/dyt_init"
ARMS = {("0.02", "0.02"): "a", ("0.2", "0.2"): "b", ("0.02", "0.2"): "c", ("0.2", "0.02"): "d"}


def last_diag(run_dir):
    last = None
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        j = json.loads(line)
        if "dyt_saturated" in j:
            last = j
    return last


def ms(xs, nd=3):
    xs = [x for x in xs if x is not None and math.isfinite(x)]
    if not xs:
        return "–"
    sd = statistics.stdev(xs) if len(xs) > 1 else 0.0
    return f"{statistics.mean(xs):.{nd}f} ± {sd:.{nd}f}"


def main():
    arms = {}
    fixed = {"ab": {}, "c": {"model.init_std": "0.02"}, "d": {"model.init_std": "0.2"}}
    runs = [(name, r) for name in fixed if (ROOT / name / "sweep.json").exists()
            for r in json.loads((ROOT / name / "sweep.json").read_text())["runs"]]
    for name, r in runs:
        o = {**fixed[name], **r["overrides"]}
        key = (o["model.init_std"], o.get("model.embed_init_std", o["model.init_std"]))
        v = r.get("final_val_loss")
        ok = r.get("status") == "done" and v is not None and math.isfinite(v)
        arms.setdefault(key, []).append((v if ok else None, last_diag(ROOT / name / r["dir"])))
    sites = None
    print("| arm | init_std | embed_init_std | final val loss (mean ± std) | per seed | "
          "sites fully / not saturated per seed | max resid RMS (mean) |")
    print("|---|---|---|---|---|---|---|")
    for key in sorted(arms, key=lambda k: ARMS.get(k, k)):
        runs = arms[key]
        full = [sum(v >= 0.99 for v in d["dyt_saturated"].values()) for _, d in runs]
        none = [sum(v <= 0.01 for v in d["dyt_saturated"].values()) for _, d in runs]
        resid = [max(x for x in d["resid_rms"] if x is not None) for _, d in runs]
        sites = sites or list(runs[0][1]["dyt_saturated"])
        print(f"| {ARMS.get(key, '?')} | {key[0]} | {key[1]} | {ms([v for v, _ in runs])} | "
              + " / ".join("–" if v is None else f"{v:.3f}" for v, _ in runs) + " | "
              + " ; ".join(f"{f} / {n}" for f, n in zip(full, none)) + f" | {ms(resid, 1)} |")
    print("\nSaturated fraction per site at the last diagnostics record (mean over seeds):\n")
    print("| arm | " + " | ".join(sites) + " |")
    print("|---|" + "---|" * len(sites))
    for key in sorted(arms, key=lambda k: ARMS.get(k, k)):
        cells = [ms([d["dyt_saturated"][site] for _, d in arms[key]], 2) for site in sites]
        print(f"| {ARMS.get(key, '?')} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
