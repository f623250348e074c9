#!/usr/bin/env python3
"""The tables and figures of finding 16 (docs/findings.md) from the sweeps scripts/findings_mup.sh
wrote: per optimizer, parametrization and width, the best learning rate (on the grid and from a
parabola through the best point and its neighbours in log2 lr), the best final val loss, the
learning-rate sensitivity, the final val loss at every learning rate, and what tuning at d 64 costs
at each width ("transfer regret": the loss at d 64's best learning rate minus the width's own
best). Markdown on stdout; with --svg DIR, one figure per optimizer (final val loss against the
learning rate, a panel per parametrization, a line per width) as DIR/mup_<optimizer>.svg.

    python3 scripts/findings_mup_tables.py runs/findings [--svg docs/findings]
"""
import json
import math
import pathlib
import sys

from findings_svg import lr_panels

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
ROOT = pathlib.Path(ARGS[0] if ARGS else "runs/findings") / "mup"
SVG_DIR = pathlib.Path(sys.argv[sys.argv.index("--svg") + 1]) if "--svg" in sys.argv else None
if SVG_DIR is not None and str(SVG_DIR) in ARGS:
    ARGS.remove(str(SVG_DIR))
OPTIMIZERS = ["adamw", "muon"]
PARAMS = ["standard", "mup"]


def sweep(path):
    p = ROOT / path / "sweep.json"
    return json.loads(p.read_text()) if p.exists() else None


def curves(opt):
    """{param: {width: [(lr, final val loss or None), ...] sorted by lr}}."""
    out = {p: {} for p in PARAMS}
    for d in sorted(int(x.name[1:].split("_")[0]) for x in ROOT.glob(f"d*_{opt}")):
        s = sweep(f"d{d}_{opt}")
        if not s:
            continue
        for r in s["runs"]:
            p = r["overrides"].get("model.parametrization")
            lr = float(r["overrides"]["optim.lr"])
            v = r.get("final_val_loss")
            ok = r.get("status") == "done" and v is not None and math.isfinite(v)
            out[p].setdefault(d, []).append((lr, v if ok else None))
        for p in PARAMS:
            out[p].get(d, []).sort()
    return out


def best(points):
    """(grid lr, loss, interpolated lr) of the lowest loss; the interpolation is the vertex of the
    parabola through the best point and its two neighbours in log2 lr (the grid lr at an edge)."""
    finite = [(i, lr, v) for i, (lr, v) in enumerate(points) if v is not None]
    if not finite:
        return None, None, None
    i, lr, v = min(finite, key=lambda t: t[2])
    if 0 < i < len(points) - 1 and points[i - 1][1] is not None and points[i + 1][1] is not None:
        x = [math.log2(points[k][0]) for k in (i - 1, i, i + 1)]
        y = [points[k][1] for k in (i - 1, i, i + 1)]
        den = (x[0] - x[1]) * (x[0] - x[2]) * (x[1] - x[2])
        a = (x[2] * (y[1] - y[0]) + x[1] * (y[0] - y[2]) + x[0] * (y[2] - y[1])) / den
        b = (x[2] ** 2 * (y[0] - y[1]) + x[1] ** 2 * (y[2] - y[0]) + x[0] ** 2 * (y[1] - y[2])) / den
        if a > 0:
            return lr, v, 2 ** (-b / (2 * a))
    return lr, v, lr


def sensitivity(points):
    """Mean over the grid of min(final val loss, initial loss ~ ln 256) minus the best (the sweep's
    definition, with a diverged run counted at the initial loss)."""
    init = math.log(256)
    vals = [min(v, init) if v is not None else init for _, v in points]
    b = min(vals)
    return sum(vals) / len(vals) - b


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def tables():
    for opt in OPTIMIZERS:
        c = curves(opt)
        widths = sorted(set(c["standard"]) | set(c["mup"]))
        if not widths:
            continue
        common = set.intersection(*[{lr for lr, _ in c[p][d]} for p in PARAMS for d in widths if d in c[p]])
        print(f"### {opt}\n")
        print(f"Best final val loss, its learning rate, and the sensitivity over the {len(common)} "
              f"learning rates every width has ({min(common):.3g} to {max(common):.3g}):\n")
        print("| parametrization | " + " | ".join(f"d {d}" for d in widths) + " |")
        print("|---|" + "---|" * len(widths))
        for p in PARAMS:
            cells = []
            for d in widths:
                pts = c[p].get(d)
                if not pts:
                    cells.append("")
                    continue
                lr, v, lr_fit = best(pts)
                sens = sensitivity([(l, x) for l, x in pts if l in common])
                cells.append(f"{fmt(v)} at {lr:.3g} (fit {lr_fit:.3g}); sens {sens:.3f}")
            print(f"| {p} | " + " | ".join(cells) + " |")
        print("\nTransfer regret (final val loss at d 64's best learning rate minus the width's best):\n")
        print("| parametrization | " + " | ".join(f"d {d}" for d in widths) + " |")
        print("|---|" + "---|" * len(widths))
        for p in PARAMS:
            base = c[p].get(widths[0])
            lr0 = best(base)[0] if base else None
            cells = []
            for d in widths:
                pts = dict(c[p].get(d, []))
                b = best(c[p].get(d, []))[1]
                v = pts.get(lr0)
                cells.append("n/a" if v is None or b is None else f"{v - b:+.3f}")
            print(f"| {p} | " + " | ".join(cells) + " |")
        print("\nFinal val loss per learning rate (div: diverged or failed):\n")
        print("| parametrization | width | " + " | ".join(
            f"{lr:.3g}" for lr, _ in c["standard"][widths[0]]) + " |")
        print("|---|---|" + "---|" * len(c["standard"][widths[0]]))
        for p in PARAMS:
            for d in widths:
                pts = c[p].get(d, [])
                row = {lr: v for lr, v in pts}
                b = best(pts)[0]
                cells = []
                for lr, _ in c["standard"][widths[0]]:
                    if lr not in row:
                        cells.append("")
                    elif row[lr] is None:
                        cells.append("div")
                    else:
                        cells.append(f"**{row[lr]:.3f}**" if lr == b else f"{row[lr]:.3f}")
                print(f"| {p} | {d} | " + " | ".join(cells) + " |")
        print()


def long_tables():
    """The 4x-longer AdamW arm: final val loss per learning rate at d 64 and d 256."""
    rows = []
    for d in (64, 256):
        s = sweep(f"long_d{d}_adamw")
        if not s:
            continue
        for p in PARAMS:
            pts = sorted((float(r["overrides"]["optim.lr"]),
                          r["final_val_loss"] if r.get("status") == "done" else None)
                         for r in s["runs"] if r["overrides"].get("model.parametrization") == p)
            rows.append((p, d, pts, s["runs"][0]["steps"]))
    if not rows:
        return
    lrs = [lr for lr, _ in rows[0][2]]
    print(f"### adamw, {rows[0][3]} steps\n")
    print("| parametrization | width | " + " | ".join(f"{lr:.3g}" for lr in lrs) + " |")
    print("|---|---|" + "---|" * len(lrs))
    for p, d, pts, _ in sorted(rows):
        b = best(pts)[0]
        cells = ["div" if v is None else (f"**{v:.3f}**" if lr == b else f"{v:.3f}") for lr, v in pts]
        print(f"| {p} | {d} | " + " | ".join(cells) + " |")
    print()


def svg(opt):
    c = curves(opt)
    widths = sorted(set(c["standard"]) | set(c["mup"]))
    panels = [(f"{opt}, {p}", {f"d_model {d}": c[p].get(d, []) for d in widths}) for p in PARAMS]
    lr_panels(SVG_DIR / f"mup_{opt}.svg", panels, [f"d_model {d}" for d in widths],
              "optim.lr (the base model's for mup)")


if __name__ == "__main__":
    tables()
    long_tables()
    if SVG_DIR is not None:
        for o in OPTIMIZERS:
            svg(o)
