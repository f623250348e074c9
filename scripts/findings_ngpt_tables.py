#!/usr/bin/env python3
"""The tables and figure of finding 14 (docs/findings.md) from the sweeps scripts/findings_ngpt.sh
wrote: per arm (Pre-Norm, nGPT) the final validation loss at every learning rate, the best one, the
learning-rate sensitivity (the sweeps' definition: mean over the grid of min(final val loss,
ln 256) minus the best), and the steps each arm's best run needs to reach targets set by Pre-Norm's
best run (its final loss and its loss at 1/4, 1/2 of the run), linearly interpolated between the
evaluations (every 25 steps). Markdown on stdout; with --svg DIR, DIR/ngpt.svg: validation loss
against step of each arm's best run, and final validation loss against the learning rate.

    python3 scripts/findings_ngpt_tables.py runs/findings [--svg docs/findings]
"""
import json
import math
import pathlib
import sys

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SVG_DIR = pathlib.Path(sys.argv[sys.argv.index("--svg") + 1]) if "--svg" in sys.argv else None
if SVG_DIR is not None and str(SVG_DIR) in ARGS:
    ARGS.remove(str(SVG_DIR))
ROOT = pathlib.Path(ARGS[0] if ARGS else "runs/findings") / "ngpt"
ARMS = [("pre", "Pre-Norm"), ("ngpt", "nGPT"), ("ngpt_a25", "nGPT, alpha_init 0.25")]
COLORS = {"pre": "#0072b2", "ngpt": "#d55e00", "ngpt_a25": "#009e73"}
INIT = math.log(256)


def runs(arm, key="optim.lr"):
    """[(lr (or the value of `key`), final val loss or None, [(step, val loss)])] sorted."""
    p = ROOT / arm / "sweep.json"
    if not p.exists():
        return []
    out = []
    for r in json.loads(p.read_text())["runs"]:
        lr = float(r["overrides"][key])
        curve = []
        metrics = ROOT / arm / r["dir"] / "metrics.jsonl"
        if metrics.exists():
            for line in metrics.read_text().splitlines():
                j = json.loads(line)
                if "event" not in j and j.get("val_loss") is not None:
                    curve.append((j["step"], j["val_loss"]))
        v = r.get("final_val_loss")
        ok = r.get("status") == "done" and v is not None and math.isfinite(v)
        out.append((lr, v if ok else None, curve))
    return sorted(out, key=lambda t: t[0])


def best(rs):
    finite = [r for r in rs if r[1] is not None]
    return min(finite, key=lambda r: r[1]) if finite else None


def sensitivity(rs):
    vals = [min(v, INIT) if v is not None else INIT for _, v, _ in rs]
    return sum(vals) / len(vals) - min(vals) if vals else None


def loss_at(curve, step):
    """Validation loss at `step`, interpolated between evaluations."""
    for (s0, v0), (s1, v1) in zip(curve, curve[1:]):
        if s0 <= step <= s1:
            return v0 + (v1 - v0) * (step - s0) / (s1 - s0)
    return None


def steps_to(curve, target):
    """The first step at which the (interpolated) validation loss reaches target, or None."""
    prev = None
    for s, v in curve:
        if v <= target:
            if prev is None:
                return s
            s0, v0 = prev
            return s0 + (s - s0) * (v0 - target) / (v0 - v)
        prev = (s, v)
    return None


def fmt(x, nd=3):
    return "n/a" if x is None else f"{x:.{nd}f}"


def svg(data, path):
    W, H, pad = 800, 300, 50
    pw = (W - 3 * pad) / 2
    ph = H - 2 * pad
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
             f'font-family="sans-serif" font-size="11">',
             f'<rect width="{W}" height="{H}" fill="white"/>']
    fin = [v for rs in data.values() for _, v, _ in rs if v is not None]
    if not fin:
        return
    lo = math.floor(min(fin) * 10) / 10 - 0.1
    steps = max(s for rs in data.values() for _, _, c in rs for s, _ in c)

    def panel(x0, title, xlabel, xticks, hi):
        parts.append(f'<text x="{x0 + pw / 2}" y="{pad - 15}" text-anchor="middle" '
                     f'font-size="13">{title}</text>')
        parts.append(f'<rect x="{x0}" y="{pad}" width="{pw}" height="{ph}" fill="none" '
                     f'stroke="#444"/>')
        for x, lab in xticks:
            x = x0 + x * pw
            parts.append(f'<line x1="{x}" y1="{pad + ph}" x2="{x}" y2="{pad + ph + 4}" stroke="#444"/>')
            parts.append(f'<text x="{x}" y="{pad + ph + 16}" text-anchor="middle">{lab}</text>')
        k = 0
        while lo + 0.2 * k <= hi + 1e-9:
            y = pad + ph * (1 - 0.2 * k / (hi - lo))
            parts.append(f'<line x1="{x0 - 4}" y1="{y}" x2="{x0}" y2="{y}" stroke="#444"/>')
            parts.append(f'<text x="{x0 - 6}" y="{y + 4}" text-anchor="end">{lo + 0.2 * k:.1f}</text>')
            k += 1
        parts.append(f'<text x="{x0 + pw / 2}" y="{pad + ph + 32}" text-anchor="middle">{xlabel}</text>')
        parts.append(f'<text x="{x0 - 38}" y="{pad + ph / 2}" text-anchor="middle" '
                     f'transform="rotate(-90 {x0 - 38} {pad + ph / 2})">validation loss</text>')

    def yv(v, hi):
        return pad + ph * (1 - (min(max(v, lo), hi) - lo) / (hi - lo))

    # Left: each arm's best run, validation loss against step (clipped at lo + 1).
    x0, hi_l = pad, lo + 1.0
    step_ticks = [(s / steps, str(s)) for s in range(0, steps + 1, max(100, steps // 5 // 100 * 100))]
    panel(x0, "best run of each arm (loss clipped above)", "step", step_ticks, hi_l)
    for arm, label in ARMS:
        b = best(data[arm])
        if not b:
            continue
        pts = " ".join(f"{x0 + s / steps * pw:.1f},{yv(v, hi_l):.1f}" for s, v in b[2])
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{COLORS[arm]}" stroke-width="2"/>')
    for i, (arm, label) in enumerate(ARMS):
        y = pad + 14 + 16 * i
        parts.append(f'<line x1="{x0 + pw - 150}" y1="{y - 4}" x2="{x0 + pw - 130}" y2="{y - 4}" '
                     f'stroke="{COLORS[arm]}" stroke-width="2"/>')
        parts.append(f'<text x="{x0 + pw - 125}" y="{y}">{label}</text>')
    # Right: final validation loss against the learning rate.
    x1, hi_r = 2 * pad + pw, math.ceil(max(fin) * 10) / 10 + 0.1
    lrs = sorted({lr for rs in data.values() for lr, _, _ in rs})
    l0, l1 = math.log2(lrs[0]), math.log2(lrs[-1])
    lmap = lambda lr: (math.log2(lr) - l0) / (l1 - l0 or 1)
    panel(x1, "final validation loss against the learning rate", "optim.lr",
          [(lmap(lr), f"{lr:g}") for lr in lrs], hi_r)
    for arm, label in ARMS:
        pts = [(x1 + lmap(lr) * pw, yv(v, hi_r)) for lr, v, _ in data[arm] if v is not None]
        parts.append('<polyline points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) +
                     f'" fill="none" stroke="{COLORS[arm]}" stroke-width="2"/>')
        for x, y in pts:
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLORS[arm]}"/>')
    parts.append("</svg>")
    path.write_text("\n".join(parts) + "\n")


def main():
    data = {arm: runs(arm) for arm, _ in ARMS}
    lrs = sorted({lr for rs in data.values() for lr, _, _ in rs})
    print("| arm | " + " | ".join(f"lr {lr:g}" for lr in lrs) + " | best | sensitivity |")
    print("|---|" + "---|" * (len(lrs) + 2))
    for arm, label in ARMS:
        by = {lr: v for lr, v, _ in data[arm]}
        b = best(data[arm])
        print(f"| {label} | " + " | ".join(fmt(by.get(lr)) for lr in lrs) +
              f" | {fmt(b[1]) if b else 'n/a'} at {b[0]:g} | {fmt(sensitivity(data[arm]))} |"
              if b else f"| {label} | no finished run |")
    bp = best(data["pre"])
    if not bp:
        return
    steps = bp[2][-1][0]
    targets = [(f"Pre-Norm's val loss at step {steps // 4}", loss_at(bp[2], steps // 4)),
               (f"at step {steps // 2}", loss_at(bp[2], steps // 2)),
               (f"at step {steps} (its final)", bp[1])]
    print()
    print("| target (Pre-Norm's best run) | val loss | Pre-Norm steps | nGPT steps (best lr) | "
          "ratio Pre / nGPT | nGPT alpha_init 0.25 steps | ratio |")
    print("|---|---|---|---|---|---|---|")
    bn, ba = best(data["ngpt"]), best(data["ngpt_a25"])
    for name, t in targets:
        if t is None:
            continue
        sp = steps_to(bp[2], t)
        cells = []
        for b in (bn, ba):
            sn = steps_to(b[2], t) if b else None
            cells += [fmt(sn, 0), f"{sp / sn:.2f}" if sp and sn else "not reached"]
        print(f"| {name} | {t:.3f} | {fmt(sp, 0)} | " + " | ".join(cells) + " |")
    # Three seeds of each arm at its best learning rate: the grid's run and two more.
    print()
    print("| arm (3 seeds at its best lr) | final val loss, mean +- std | steps to Pre-Norm's "
          "loss at step " + f"{steps // 2}" + " (each seed) |")
    print("|---|---|---|")
    t_half = targets[1][1]
    for arm, label in ARMS:
        b = best(data[arm])
        extra = runs(arm + "_seeds", "train.seed")
        if not b or not extra:
            continue
        rs = [b] + extra
        vals = [v for _, v, _ in rs if v is not None]
        mean = sum(vals) / len(vals)
        std = (sum((v - mean) ** 2 for v in vals) / max(1, len(vals) - 1)) ** 0.5
        st = ", ".join(fmt(steps_to(c, t_half), 0) for _, _, c in rs)
        print(f"| {label} (lr {b[0]:g}) | {mean:.3f} +- {std:.3f} | {st} |")
    if SVG_DIR is not None:
        SVG_DIR.mkdir(parents=True, exist_ok=True)
        svg(data, SVG_DIR / "ngpt.svg")


if __name__ == "__main__":
    main()
