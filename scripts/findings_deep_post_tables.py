#!/usr/bin/env python3
"""The table and figure of finding 13b (docs/findings.md) from the sweeps
scripts/findings_deep_post.sh wrote: per variant (post, deepnorm, admin, admin_logn, rezero,
layerscale, hybrid, pre), depth and learning rate, the final val loss and the first logged step whose training
loss is below 2.8 nats (the unigram plateau of the corpus is about 2.99; "-" when never), and the
status. Markdown on stdout; with --svg DIR, DIR/deep_post.svg (final val loss against depth, a
panel per learning rate, a line per variant).

    python3 scripts/findings_deep_post_tables.py runs/findings [--svg docs/findings]
"""
import json
import math
import pathlib
import sys

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SVG_DIR = pathlib.Path(sys.argv[sys.argv.index("--svg") + 1]) if "--svg" in sys.argv else None
if SVG_DIR is not None and str(SVG_DIR) in ARGS:
    ARGS.remove(str(SVG_DIR))
ROOT = pathlib.Path(ARGS[0] if ARGS else "runs/findings") / "deep_post"
VARIANTS = ["post", "deepnorm", "admin", "admin_logn", "rezero", "layerscale", "hybrid", "pre"]
COLORS = {"post": "#000000", "deepnorm": "#0072b2", "admin": "#d55e00", "admin_logn": "#56b4e9", "rezero": "#009e73",
          "layerscale": "#cc79a7", "hybrid": "#e69f00", "pre": "#999999"}
THRESHOLD = 2.8


def first_below(run_dir):
    p = run_dir / "metrics.jsonl"
    if not p.exists():
        return None
    for line in p.read_text().splitlines():
        try:
            j = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "loss" in j and "step" in j and j["loss"] is not None and j["loss"] < THRESHOLD:
            return j["step"]
    return None


def results():
    """{variant: {(L, lr): (final val loss or None, status, first step below THRESHOLD)}}."""
    out = {}
    for v in VARIANTS:
        p = ROOT / v / "sweep.json"
        if not p.exists():
            continue
        s = json.loads(p.read_text())
        for r in s["runs"]:
            L = int(r["overrides"]["model.n_layer"])
            lr = float(r["overrides"]["optim.lr"])
            val = r.get("final_val_loss")
            ok = val is not None and math.isfinite(val)
            out.setdefault(v, {})[(L, lr)] = (val if ok else None, r.get("status"),
                                              first_below(ROOT / v / r["dir"]))
    return out


def long_table():
    """The longer runs (long_<variant>): final val loss (first step below THRESHOLD) per depth and
    learning rate."""
    rows, cols = {}, set()
    steps = 0
    for v in VARIANTS:
        p = ROOT / f"long_{v}" / "sweep.json"
        if not p.exists():
            continue
        s = json.loads(p.read_text())
        for r in s["runs"]:
            key = (int(r["overrides"]["model.n_layer"]), float(r["overrides"]["optim.lr"]))
            cols.add(key)
            val = r.get("final_val_loss")
            ok = val is not None and math.isfinite(val)
            steps = max(steps, r.get("steps") or 0)
            rows.setdefault(v, {})[key] = (val if ok else None, r.get("status"),
                                           first_below(ROOT / f"long_{v}" / r["dir"]))
    if not rows:
        return
    cols = sorted(cols)
    print(f"\n{steps} steps: final val loss (first step with training loss < {THRESHOLD})\n")
    print("| variant | " + " | ".join(f"L={L}, lr {lr:g}" for L, lr in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for v in VARIANTS:
        if v not in rows:
            continue
        cells = []
        for key in cols:
            val, status, step = rows[v].get(key, (None, "missing", None))
            txt = ("-" if val is None else f"{val:.3f}") + (f" ({step})" if step is not None else " (-)")
            if status not in ("done", None):
                txt += f" {status}"
            cells.append(txt)
        print(f"| {v} | " + " | ".join(cells) + " |")


def table(res):
    cells = sorted({k for r in res.values() for k in r})
    lrs = sorted({lr for _, lr in cells})
    depths = sorted({L for L, _ in cells})
    for lr in lrs:
        print(f"\nlr {lr:g}: final val loss (first step with training loss < {THRESHOLD})\n")
        print("| variant | " + " | ".join(f"L={L}" for L in depths) + " |")
        print("|---|" + "---|" * len(depths))
        for v in VARIANTS:
            if v not in res:
                continue
            row = []
            for L in depths:
                val, status, step = res[v].get((L, lr), (None, "missing", None))
                txt = "-" if val is None else f"{val:.3f}"
                txt += f" ({step})" if step is not None else " (-)"
                if status not in ("done", None):
                    txt += f" {status}"
                row.append(txt)
            print(f"| {v} | " + " | ".join(row) + " |")


def svg(res):
    cells = sorted({k for r in res.values() for k in r})
    lrs = sorted({lr for _, lr in cells})
    depths = sorted({L for L, _ in cells})
    vals = [x[0] for r in res.values() for x in r.values() if x[0] is not None]
    if not vals or not depths:
        return
    y0, y1 = min(vals) - 0.05, max(max(vals), 3.0) + 0.05
    x0, x1 = math.log2(depths[0]) - 0.3, math.log2(depths[-1]) + 0.3
    W, H, M = 360, 320, 55
    n = len(lrs)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{n * W + 130}" height="{H + 40}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{n * W + 130}" height="{H + 40}" fill="white"/>']
    for k, lr in enumerate(lrs):
        ox = k * W
        sx = lambda x: ox + M + (x - x0) / (x1 - x0) * (W - M - 15)
        sy = lambda y: 30 + (y1 - y) / (y1 - y0) * (H - 70)
        out.append(f'<text x="{ox + W / 2}" y="18" text-anchor="middle" font-weight="bold">'
                   f'lr {lr:g}, no warmup</text>')
        out.append(f'<rect x="{ox + M}" y="30" width="{W - M - 15}" height="{H - 70}" fill="none" '
                   'stroke="#888"/>')
        for L in depths:
            out.append(f'<text x="{sx(math.log2(L)):.1f}" y="{H - 25}" text-anchor="middle">{L}</text>')
        t = math.ceil(y0 * 5) / 5
        while t <= y1:
            out.append(f'<text x="{ox + M - 5}" y="{sy(t) + 4:.1f}" text-anchor="end">{t:.1f}</text>')
            out.append(f'<line x1="{ox + M}" x2="{ox + W - 15}" y1="{sy(t):.1f}" y2="{sy(t):.1f}" stroke="#eee"/>')
            t += 0.2
        out.append(f'<line x1="{ox + M}" x2="{ox + W - 15}" y1="{sy(2.99):.1f}" y2="{sy(2.99):.1f}" '
                   'stroke="#888" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{ox + W / 2}" y="{H - 8}" text-anchor="middle">layers (model.n_layer)</text>')
        for v in VARIANTS:
            pts = [(math.log2(L), res[v][(L, lr)][0]) for L in depths
                   if v in res and (L, lr) in res[v] and res[v][(L, lr)][0] is not None]
            if not pts:
                continue
            path = " ".join(f"{'M' if j == 0 else 'L'}{sx(x):.1f},{sy(y):.1f}" for j, (x, y) in enumerate(pts))
            dash = ' stroke-dasharray="5 3"' if v == "pre" else ""
            out.append(f'<path d="{path}" fill="none" stroke="{COLORS[v]}" stroke-width="2"{dash}/>')
            for x, y in pts:
                out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{COLORS[v]}"/>')
    out.append(f'<text x="{M - 45}" y="{H / 2}" transform="rotate(-90 {M - 45} {H / 2})" '
               'text-anchor="middle">final val loss</text>')
    for i, v in enumerate(x for x in VARIANTS if x in res):
        y = 50 + 18 * i
        out.append(f'<line x1="{n * W + 10}" x2="{n * W + 35}" y1="{y}" y2="{y}" '
                   f'stroke="{COLORS[v]}" stroke-width="2"/>')
        out.append(f'<text x="{n * W + 40}" y="{y + 4}">{v}</text>')
    out.append(f'<text x="{n * W + 10}" y="{60 + 18 * len(res)}">dashed: unigram 2.99</text>')
    out.append("</svg>")
    SVG_DIR.mkdir(parents=True, exist_ok=True)
    (SVG_DIR / "deep_post.svg").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    r = results()
    table(r)
    long_table()
    if SVG_DIR is not None:
        svg(r)
