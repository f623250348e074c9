#!/usr/bin/env python3
"""The tables and figure of finding 13 (docs/findings.md) from the sweeps
scripts/findings_norm_free.sh wrote under OUT_DIR/norm_free: final val loss by norm kind, placement
and learning rate with each variant's best rate and learning-rate sensitivity (sweep.json), and for
DyT / Derf runs the state of their sites at the end (the mean over sites of dyt_saturated, the
smallest and largest alpha) with the residual stream's largest RMS (resid_rms, last diagnostics
record); the initial-alpha, depth and initial-scale arms. Markdown on stdout; with --svg DIR, the
figure DIR/norm_free.svg (final val loss against the learning rate, a panel per placement, a line
per norm kind).

    python3 scripts/findings_norm_free_tables.py runs/findings [--svg docs/findings]
"""
import json
import math
import pathlib
import sys

from findings_svg import lr_panels

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
SVG_DIR = pathlib.Path(sys.argv[sys.argv.index("--svg") + 1]) if "--svg" in sys.argv else None
if SVG_DIR is not None and str(SVG_DIR) in ARGS:
    ARGS.remove(str(SVG_DIR))
ROOT = pathlib.Path(ARGS[0] if ARGS else "runs/findings") / "norm_free"
NORMS = ["layernorm", "rmsnorm", "dyt", "derf"]
PLACEMENTS = ["pre", "peri", "post"]


def sweep(path):
    p = ROOT / path / "sweep.json"
    return json.loads(p.read_text()) if p.exists() else None


def fmt(x, nd=3):
    return "–" if x is None or not math.isfinite(x) else f"{x:.{nd}f}"


def loss(run):
    v = run.get("final_val_loss")
    ok = run.get("status") == "done" and v is not None and math.isfinite(v)
    return v if ok else None


def end_state(run_dir):
    """(mean saturated fraction over sites, min alpha, max alpha, max resid_rms) at the last
    diagnostics record; None fields where the run has no DyT sites."""
    last = None
    p = run_dir / "metrics.jsonl"
    if not p.exists():
        return None, None, None, None
    for line in p.read_text().splitlines():
        j = json.loads(line)
        if "resid_rms" in j:
            last = j
    if last is None:
        return None, None, None, None
    sat = [v for v in last.get("dyt_saturated", {}).values() if v is not None]
    alpha = [v for v in last.get("dyt_alpha", {}).values() if v is not None]
    resid = [v for v in last["resid_rms"] if v is not None]
    return (sum(sat) / len(sat) if sat else None, min(alpha) if alpha else None,
            max(alpha) if alpha else None, max(resid) if resid else None)


def state_cells(run_dir):
    sat, amin, amax, resid = end_state(run_dir)
    a = f"{amin:.2f}–{amax:.2f}" if amin is not None else "–"
    return f"{fmt(sat, 2)} | {a} | {fmt(resid, 1)}"


def grid():
    s = sweep("grid")
    if not s:
        return {}
    curves = {}
    for r in s["runs"]:
        o = r["overrides"]
        curves.setdefault(o["model.placement"], {}).setdefault(o["model.norm"], []).append(
            (float(o["optim.lr"]), loss(r), ROOT / "grid" / r["dir"]))
    for p in curves.values():
        for line in p.values():
            line.sort(key=lambda t: t[0])
    sens = {(v["variant"]["model.norm"], v["variant"]["model.placement"]): v
            for v in s["sensitivity"]}
    lrs = sorted({t[0] for p in curves.values() for line in p.values() for t in line})
    print("### Final val loss by norm kind, placement and learning rate (d 64, 4 blocks, "
          f"{s['runs'][0].get('steps', '?')} steps)\n")
    print("| placement | norm | " + " | ".join(f"lr {lr:g}" for lr in lrs)
          + " | best | LR sensitivity | sites saturated (mean, best lr) | alpha (best lr) "
          "| max resid RMS (best lr) |")
    print("|" + "---|" * (len(lrs) + 7))
    for p in PLACEMENTS:
        for n in NORMS:
            line = curves.get(p, {}).get(n)
            if not line:
                continue
            v = sens.get((n, p), {})
            ok = [t for t in line if t[1] is not None]
            b = min(ok, key=lambda t: t[1]) if ok else None
            cells = state_cells(b[2]) if b else "– | – | –"
            print(f"| {p} | {n} | " + " | ".join(fmt(t[1]) for t in line)
                  + f" | {fmt(v.get('best_loss'))} at {v.get('best_lr', 0):g} | "
                  f"{fmt(v.get('sensitivity'))} | {cells} |")
    print()
    return curves


def alpha():
    rows = []
    for d in sorted(ROOT.glob("alpha/a*"), key=lambda p: float(p.name[1:])):
        s = sweep(d.relative_to(ROOT))
        for r in (s or {}).get("runs", []):
            rows.append((float(d.name[1:]), r["overrides"]["model.norm"], loss(r), d / r["dir"]))
    if not rows:
        return
    print("### Initial alpha (every site), Pre-Norm, lr 4e-3\n")
    print("| initial alpha | norm | final val loss | sites saturated (mean) | alpha at the end "
          "| max resid RMS |")
    print("|---|---|---|---|---|---|")
    for a, n, v, d in sorted(rows, key=lambda t: (t[1], t[0])):
        print(f"| {a:g} | {n} | {fmt(v)} | {state_cells(d)} |")
    print()


def table(name, title, keys):
    s = sweep(name)
    if not s:
        return
    print(f"### {title}\n")
    print("| " + " | ".join(k.split(".")[-1] for k in keys)
          + " | final val loss | sites saturated (mean) | alpha at the end | max resid RMS |")
    print("|" + "---|" * (len(keys) + 4))
    for r in sorted(s["runs"], key=lambda r: [r["overrides"].get(k, "") for k in keys]):
        print("| " + " | ".join(r["overrides"].get(k, "") for k in keys)
              + f" | {fmt(loss(r))} | {state_cells(ROOT / name / r['dir'])} |")
    print()


if __name__ == "__main__":
    curves = grid()
    alpha()
    table("depth", "12 blocks without warmup, lr 2e-3", ["model.placement", "model.norm"])
    table("init", "Larger initial weights (model.init_std), Pre-Norm, lr 4e-3",
          ["model.init_std", "model.norm"])
    table("embed", "Embeddings scaled by sqrt(d_model) = 8 (model.embed_scale), Pre-Norm, lr 4e-3",
          ["model.norm"])
    if SVG_DIR is not None and curves:
        panels = [(f"{p}-norm", {n: [(lr, v) for lr, v, _ in curves[p].get(n, [])]
                                 for n in NORMS}) for p in PLACEMENTS if p in curves]
        lr_panels(SVG_DIR / "norm_free.svg", panels, NORMS, "optim.lr")
