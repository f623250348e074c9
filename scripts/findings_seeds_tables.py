#!/usr/bin/env python3
"""The 3-seed tables of findings 11 and 16 (docs/findings.md) from the sweeps
scripts/findings_seeds.sh wrote under OUT_DIR/seeds: the final val loss per learning rate (mean ±
sample std over the seeds), the best learning rate of each seed, the best loss (each seed's lowest
over the grid) and the paired differences: Muon's best minus AdamW's (finding 11) and, per
parametrization, the loss at d 64's best learning rate minus the width's own best (finding 16).
Markdown on stdout.

    python3 scripts/findings_seeds_tables.py runs/findings
"""
import json
import math
import pathlib
import statistics
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/findings") / "seeds"


def cells(name):
    """{lr: {seed: final val loss or None}} of one sweep."""
    out = {}
    f = ROOT / name / "sweep.json"
    if not f.exists():
        return out
    for r in json.loads(f.read_text())["runs"]:
        v = r.get("final_val_loss")
        ok = r.get("status") == "done" and v is not None and math.isfinite(v)
        out.setdefault(float(r["overrides"]["optim.lr"]), {})[r.get("seed", 0)] = v if ok else None
    return out


def ms(xs, nd=3):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "div"
    if len(xs) == 1:
        return f"{xs[0]:.{nd}f}"
    return f"{statistics.mean(xs):.{nd}f} ± {statistics.stdev(xs):.{nd}f}"


def best(c, seed):
    """(lr, loss) of one seed's lowest final val loss over the grid."""
    pts = [(v[seed], lr) for lr, v in c.items() if v.get(seed) is not None]
    return (min(pts)[1], min(pts)[0]) if pts else (None, None)


def seeds_of(c):
    return sorted({s for v in c.values() for s in v})


def lr_table(title, rows):
    lrs = sorted({lr for _, c in rows for lr in c})
    print(f"\n{title}\n")
    print("| arm | " + " | ".join(f"{lr:g}" for lr in lrs) + " | best lr per seed | best loss |")
    print("|---|" + "---|" * (len(lrs) + 2))
    for label, c in rows:
        if not c:
            continue
        ss = seeds_of(c)
        bl = [best(c, s) for s in ss]
        print(f"| {label} | " + " | ".join(ms(list(c[lr].values())) if lr in c else ""
                                           for lr in lrs)
              + " | " + ", ".join(f"{lr:g}" for lr, _ in bl) + f" | {ms([v for _, v in bl])} |")


def main():
    widths = (64, 128, 256)
    f11 = {d: (cells(f"f11_d{d}_adamw"), cells(f"f11_d{d}_muon")) for d in widths}
    lr_table("Finding 11: final val loss, mean ± std over seeds",
             [(f"{o} d {d}", f11[d][i]) for d in widths for i, o in enumerate(("AdamW", "Muon"))])
    print("\nFinding 11: Muon's best loss minus AdamW's, paired by seed\n")
    print("| width | per seed | mean ± std |\n|---|---|---|")
    for d in widths:
        a, m = f11[d]
        if not a or not m:
            continue
        gaps = [best(m, s)[1] - best(a, s)[1] for s in seeds_of(a) if s in seeds_of(m)
                and best(m, s)[1] is not None and best(a, s)[1] is not None]
        print(f"| {d} | " + ", ".join(f"{g:+.3f}" for g in gaps) + f" | {ms(gaps)} |")

    base = cells("f16_d64_both")
    rows = [("both d 64", base)]
    for d in widths[1:]:
        rows += [(f"standard d {d}", cells(f"f16_d{d}_standard")),
                 (f"μP d {d}", cells(f"f16_d{d}_mup"))]
    lr_table("Finding 16: AdamW final val loss, mean ± std over seeds", rows)
    if not base:
        return
    # d 64's best learning rate: the lowest mean over the seeds.
    lr64 = min((statistics.mean([x for x in v.values() if x is not None]), lr)
               for lr, v in base.items() if any(x is not None for x in v.values()))[1]
    print(f"\nFinding 16: what tuning at d 64 costs (d 64's best mean lr {lr64:g}): the loss at "
          "that lr minus the width's own best, paired by seed\n")
    print("| arm | per seed | mean ± std |\n|---|---|---|")
    for label, c in rows[1:]:
        if lr64 not in c:
            print(f"| {label} | {lr64:g} not on this grid | |")
            continue
        cost = [c[lr64][s] - best(c, s)[1] for s in seeds_of(c)
                if c[lr64].get(s) is not None and best(c, s)[1] is not None]
        print(f"| {label} | " + ", ".join(f"{x:+.3f}" for x in cost) + f" | {ms(cost)} |")


if __name__ == "__main__":
    main()
