#!/usr/bin/env python3
"""The tables and the figure of finding 15 (docs/findings.md) from the sweeps
scripts/findings_gates.sh wrote: per variant (no gate or sink, head gate, elementwise gate, sink
one, sink learned) and learning rate, the final val loss, the largest attention logit
(attn_max_logit, max over layers) at the last diagnostics record and its maximum over training,
the attention mass on the first position (attn_first_mass, mean over layers) and the sink's mass
(attn_sink_mass) at the end; per variant the learning-rate sensitivity (as `normlab sweep`: the
mean over the grid of min(final val loss, initial loss) minus the best final val loss; a diverged
run counts as its initial loss) and the best rate. Seeds (SEEDS > 1) are averaged. Markdown on
stdout; with --svg DIR, DIR/gates_lr.svg: three panels against the learning rate (final val loss,
largest attention logit, first-position mass), one line per variant.

    python3 scripts/findings_gates_tables.py runs/findings [--svg docs/findings]
"""
import json
import math
import pathlib
import re
import sys

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SVG_DIR = pathlib.Path(sys.argv[sys.argv.index("--svg") + 1]) if "--svg" in sys.argv else None
if SVG_DIR is not None and str(SVG_DIR) in ARGS:
    ARGS.remove(str(SVG_DIR))
ROOT = pathlib.Path(ARGS[0] if ARGS else "runs/findings") / "gates"
VARIANTS = [("none", "gate", "model.attn_gate", "none"),
            ("head gate", "gate", "model.attn_gate", "head"),
            ("elementwise gate", "gate", "model.attn_gate", "elementwise"),
            ("sink one", "sink", "model.attn_sink", "one"),
            ("sink learned", "sink", "model.attn_sink", "learned")]
COLORS = ["#000000", "#0072b2", "#56b4e9", "#d55e00", "#e69f00"]


def diag_records(run_dir):
    p = run_dir / "metrics.jsonl"
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        try:
            j = json.loads(line)
        except json.JSONDecodeError:
            continue
        if "attn_max_logit" in j:
            out.append(j)
    return out


def finite(xs):
    return [x for x in xs if x is not None and math.isfinite(x)]


def mean(xs):
    xs = finite(xs)
    return sum(xs) / len(xs) if xs else None


def collect():
    """{variant label: {lr: [per-seed dicts]}}"""
    data = {v[0]: {} for v in VARIANTS}
    for label, sweep, key, value in VARIANTS:
        p = ROOT / sweep / "sweep.json"
        if not p.exists():
            continue
        s = json.loads(p.read_text())
        for r in s["runs"]:
            if r["overrides"].get(key) != value:
                continue
            lr = float(r["overrides"]["optim.lr"])
            recs = diag_records(ROOT / sweep / r["dir"])
            last = recs[-1] if recs else {}
            v = r.get("final_val_loss")
            ok = r.get("status") == "done" and v is not None and math.isfinite(v)
            data[label].setdefault(lr, []).append({
                "seed": r.get("seed", 0),
                "val": v if ok else None,
                "init": r.get("initial_loss"),
                "logit_end": max(finite(last.get("attn_max_logit", []))) if last else None,
                "logit_peak": max((max(finite(j["attn_max_logit"]) or [0]) for j in recs),
                                  default=None),
                "first": mean(last.get("attn_first_mass", [])) if last else None,
                "first_l0": (last.get("attn_first_mass") or [None])[0] if last else None,
                "sink": mean(last.get("attn_sink_mass", [])) if last else None,
            })
    return data


def per_lr(data, label, field):
    """[(lr, mean over seeds of field or None)] sorted by lr."""
    return [(lr, mean([d[field] for d in ds])) for lr, ds in sorted(data[label].items())]


def sensitivity(data, label, seed=None):
    """(sensitivity, best lr, best loss) over the grid; seeds averaged per lr first (or only
    `seed`'s runs)."""
    vals = []
    for lr, ds in sorted(data[label].items()):
        if seed is not None:
            ds = [d for d in ds if d["seed"] == seed]
            if not ds:
                continue
        init = mean([d["init"] for d in ds])
        v = mean([d["val"] for d in ds]) if all(d["val"] is not None for d in ds) else None
        vals.append((lr, v, init))
    ok = [(lr, v) for lr, v, _ in vals if v is not None]
    if not ok:
        return None, None, None
    blr, bv = min(ok, key=lambda t: t[1])
    sens = sum(min(v, i) if v is not None else i for _, v, i in vals) / len(vals) - bv
    return sens, blr, bv


def fmt(x, nd=3):
    if x is None:
        return "div"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{nd}f}"


def seq_len():
    """model.seq_len of the runs (from a run's config.toml), for the uniform baseline."""
    for cfg in sorted(ROOT.glob("*/*/config.toml")):
        m = re.search(r"^seq_len = (\d+)", cfg.read_text(), re.M)
        if m:
            return int(m.group(1))
    return None


def uniform_first_mass(T):
    """The first-position mass of uniform causal attention: mean over rows i = 1..T-1 of 1/(i+1)."""
    return sum(1.0 / (i + 1) for i in range(1, T)) / (T - 1)


def tables(data):
    lrs = sorted({lr for d in data.values() for lr in d})
    if not lrs:
        print("no runs found under", ROOT)
        return
    T = seq_len()
    if T:
        print(f"Uniform causal attention over {T} positions would put {uniform_first_mass(T):.3f} "
              "on the first position (mean over rows 1..T-1).\n")
    head = "| variant | " + " | ".join(f"{lr:g}" for lr in lrs) + " |"
    sep = "|---|" + "---|" * len(lrs)
    for title, field, nd in (("Final val loss", "val", 3),
                             ("Largest attention logit at the end (max over layers)", "logit_end", 1),
                             ("Largest attention logit over training", "logit_peak", 1),
                             ("Attention mass on the first position at the end (mean over layers)",
                              "first", 3),
                             ("... in layer 0", "first_l0", 3),
                             ("Sink mass at the end (mean over layers)", "sink", 3)):
        rows = []
        for label, *_ in VARIANTS:
            if field == "sink" and not label.startswith("sink"):
                continue
            pts = dict(per_lr(data, label, field))
            rows.append(f"| {label} | " + " | ".join(fmt(pts.get(lr), nd) for lr in lrs) + " |")
        print(f"### {title}\n\n{head}\n{sep}\n" + "\n".join(rows) + "\n")
    seeds = sorted({d["seed"] for v in data.values() for ds in v.values() for d in ds})
    if len(seeds) > 1:
        rows = []
        for label, *_ in VARIANTS:
            cells = []
            for lr in lrs:
                ds = sorted(data[label].get(lr, []), key=lambda d: d["seed"])
                cells.append(" / ".join(fmt(d["val"]) for d in ds))
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
        print(f"### Final val loss per seed ({', '.join(map(str, seeds))})\n\n{head}\n{sep}\n"
              + "\n".join(rows) + "\n")
    print("### Learning-rate sensitivity (seeds averaged per rate; then per seed)\n")
    print("| variant | sensitivity | best lr | best val loss |"
          + "".join(f" seed {k} |" for k in seeds if len(seeds) > 1))
    print("|---|---|---|---|" + "---|" * (len(seeds) if len(seeds) > 1 else 0))
    for label, *_ in VARIANTS:
        s, blr, bv = sensitivity(data, label)
        per = "".join(f" {fmt(sensitivity(data, label, k)[0])} |" for k in seeds if len(seeds) > 1)
        print(f"| {label} | {fmt(s)} | {blr if blr is None else f'{blr:g}'} | {fmt(bv)} |" + per)
    print()


def svg(data):
    panels = [("final val loss", "val", False), ("largest attention logit (end)", "logit_end", True),
              ("mass on position 0 (end)", "first", False)]
    lrs = sorted({lr for d in data.values() for lr in d})
    if not lrs:
        return
    W, H, M = 330, 300, 55
    x0, x1 = math.log10(lrs[0]) - 0.2, math.log10(lrs[-1]) + 0.2
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{3 * W + 150}" height="{H}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{3 * W + 150}" height="{H}" fill="white"/>']
    for k, (title, field, logy) in enumerate(panels):
        ox = k * W
        series = {label: [(lr, v) for lr, v in per_lr(data, label, field) if v is not None]
                  for label, *_ in VARIANTS}
        ys = [v for s in series.values() for _, v in s]
        if not ys:
            continue
        tr = (lambda y: math.log10(max(y, 1e-3))) if logy else (lambda y: y)
        y0, y1 = min(tr(y) for y in ys), max(tr(y) for y in ys)
        if field == "val":
            y1 = min(y1, y0 + 2.0)
        if field == "first" and seq_len():
            y0, y1 = min(y0, uniform_first_mass(seq_len())), max(y1, uniform_first_mass(seq_len()))
        pad = 0.05 * (y1 - y0 or 1)
        y0, y1 = y0 - pad, y1 + pad
        sx = lambda x: ox + M + (math.log10(x) - x0) / (x1 - x0) * (W - M - 15)
        sy = lambda y: 30 + (y1 - min(max(tr(y), y0), y1)) / (y1 - y0) * (H - 70)
        out.append(f'<text x="{ox + W / 2}" y="18" text-anchor="middle" font-weight="bold">'
                   f'{title}</text>')
        out.append(f'<rect x="{ox + M}" y="30" width="{W - M - 15}" height="{H - 70}" fill="none" '
                   'stroke="#888"/>')
        for lr in lrs:
            out.append(f'<text x="{sx(lr):.1f}" y="{H - 25}" text-anchor="middle">{lr:g}</text>')
        ticks = ([float(e) for e in range(math.ceil(y0), math.floor(y1) + 1)] if logy
                 else [y0 + (y1 - y0) * t / 4 for t in range(5)])
        for yv in ticks:
            lab = f"{10 ** yv:,.0f}" if logy else f"{yv:.3g}"
            ypix = 30 + (y1 - yv) / (y1 - y0) * (H - 70)
            out.append(f'<text x="{ox + M - 5}" y="{ypix + 4:.1f}" text-anchor="end">{lab}</text>')
            out.append(f'<line x1="{ox + M}" x2="{ox + W - 15}" y1="{ypix:.1f}" y2="{ypix:.1f}" '
                       'stroke="#eee"/>')
        T = seq_len()
        if field == "first" and T:  # uniform causal attention's mass on position 0
            u = uniform_first_mass(T)
            if y0 <= u <= y1:
                out.append(f'<line x1="{ox + M}" x2="{ox + W - 15}" y1="{sy(u):.1f}" '
                           f'y2="{sy(u):.1f}" stroke="#999" stroke-dasharray="4 3"/>')
                out.append(f'<text x="{ox + W - 18}" y="{sy(u) - 4:.1f}" text-anchor="end" '
                           f'fill="#777">uniform</text>')
        out.append(f'<text x="{ox + W / 2}" y="{H - 8}" text-anchor="middle">optim.lr</text>')
        for i, (label, *_) in enumerate(VARIANTS):
            line = series[label]
            if not line:
                continue
            path = " ".join(f"{'M' if j == 0 else 'L'}{sx(lr):.1f},{sy(v):.1f}"
                            for j, (lr, v) in enumerate(line))
            out.append(f'<path d="{path}" fill="none" stroke="{COLORS[i]}" stroke-width="2"/>')
            for lr, v in line:
                out.append(f'<circle cx="{sx(lr):.1f}" cy="{sy(v):.1f}" r="3" fill="{COLORS[i]}"/>')
    for i, (label, *_) in enumerate(VARIANTS):
        y = 50 + 18 * i
        out.append(f'<line x1="{3 * W + 10}" x2="{3 * W + 35}" y1="{y}" y2="{y}" '
                   f'stroke="{COLORS[i]}" stroke-width="2"/>')
        out.append(f'<text x="{3 * W + 40}" y="{y + 4}">{label}</text>')
    out.append(f'<text x="{3 * W + 10}" y="{60 + 18 * len(VARIANTS)}">missing point: diverged</text>')
    out.append(f'<text x="{3 * W + 10}" y="{78 + 18 * len(VARIANTS)}">seeds averaged</text>')
    out.append("</svg>")
    SVG_DIR.mkdir(parents=True, exist_ok=True)
    (SVG_DIR / "gates_lr.svg").write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    d = collect()
    tables(d)
    if SVG_DIR is not None:
        svg(d)
