#!/usr/bin/env python3
"""The tables of findings 11 and 12 (docs/findings.md) from the sweeps scripts/findings_optim.sh
wrote: learning-rate sensitivity, best learning rate and loss, final val loss per learning rate,
the largest attention logit, wall time and the loss at equal wall time, QK-Clip's clips, the
epsilon ladder and the spike counts. Markdown on stdout.

    python3 scripts/findings_optim_tables.py runs/findings
"""
import json
import math
import pathlib
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "runs/findings")
WIDTHS = [64, 128, 256]


def sweep(path):
    p = ROOT / path / "sweep.json"
    return json.loads(p.read_text()) if p.exists() else None


def records(run_dir):
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        out.append(json.loads(line))
    return out


def fmt(x, nd=3):
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    if abs(x) >= 1e4:
        return f"{x:.2g}"
    return f"{x:.{nd}f}" if abs(x) < 100 else f"{x:,.0f}"


def lr_text(v):
    return f"{float(v):.2g}"


def variants(s):
    """{label: sensitivity entry} of a sweep."""
    return {e["label"]: e for e in s["sensitivity"]}


def run_of(s, overrides):
    for r in s["runs"]:
        if all(str(r["overrides"].get(k)) == str(v) for k, v in overrides.items()):
            return r
    return None


def end(run_dir):
    e = [r for r in records(run_dir) if r.get("event") == "end"]
    return e[-1] if e else {}


def loss_at_time(run_dir, t):
    """Mean train loss of the logged steps in the last 10% of [0, t] of the run's clock."""
    recs = [r for r in records(run_dir) if "event" not in r and "time_s" in r]
    window = [r["loss"] for r in recs if 0.9 * t <= r["time_s"] <= t and r.get("loss") is not None]
    return sum(window) / len(window) if window else None


def finding11():
    print("## Finding 11 tables\n")
    arms = [("AdamW", "adamw_muon", "name=adamw", {"optim.name": "adamw"}),
            ("Muon (original)", "adamw_muon", "name=muon", {"optim.name": "muon"}),
            ("Muon (match_rms_adamw)", "muon_match", None, {}),
            ("Muon + QK-Norm", "muon_qknorm", None, {}),
            ("Muon + QK-Clip 50", "muon_qkclip", None, {})]
    print("| variant | " + " | ".join(f"d {d}" for d in WIDTHS) + " |")
    print("|---|" + "---|" * len(WIDTHS))
    table = {}
    for name, sw, label, _ in arms:
        cells = []
        for d in WIDTHS:
            s = sweep(f"optim/d{d}_{sw}")
            if not s:
                cells.append("n/a")
                continue
            v = variants(s)
            e = v[label] if label else next(iter(v.values()))
            table[(name, d)] = (s, e)
            cells.append(f"{fmt(e['sensitivity'])} (best {fmt(e['best_loss'])} at {lr_text(e['best_lr'])})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nFinal val loss per learning rate (div: diverged); largest attention logit at the end "
          "in brackets:\n")
    for (name, d), (s, e) in sorted(table.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        runs = [r for r in s["runs"] if all(str(r["overrides"].get(k)) == str(v) for k, v in e["variant"].items())]
        runs.sort(key=lambda r: float(r["overrides"][s["lr_key"]]))
        cells = [("div" if r["status"] == "diverged" else fmt(r["final_val_loss"])) + f" ({fmt(r['max_attn_logit'], 1)})"
                 for r in runs]
        print(f"- {name}, d {d}: " + ", ".join(cells))
    print("\nWall time (1 thread, 2 runs at once) and loss at equal wall time, each at its best lr:\n")
    print("| width | AdamW wall s | Muon wall s | AdamW final train loss | Muon's train loss at AdamW's wall time | Muon final train loss |")
    print("|---|---|---|---|---|---|")
    for d in WIDTHS:
        if ("AdamW", d) not in table or ("Muon (original)", d) not in table:
            continue
        s, ea = table[("AdamW", d)]
        _, em = table[("Muon (original)", d)]
        ra = run_of(s, {"optim.name": "adamw", "optim.lr": next(r["overrides"]["optim.lr"] for r in s["runs"] if r["overrides"]["optim.name"] == "adamw" and float(r["overrides"]["optim.lr"]) == ea["best_lr"])})
        rm = run_of(s, {"optim.name": "muon", "optim.lr": next(r["overrides"]["optim.lr"] for r in s["runs"] if r["overrides"]["optim.name"] == "muon" and float(r["overrides"]["optim.lr"]) == em["best_lr"])})
        da, dm = ROOT / f"optim/d{d}_adamw_muon" / ra["dir"], ROOT / f"optim/d{d}_adamw_muon" / rm["dir"]
        wa, wm = end(da).get("wall_s"), end(dm).get("wall_s")
        print(f"| {d} | {fmt(wa, 1)} | {fmt(wm, 1)} | {fmt(end(da).get('train_loss'))} | "
              f"{fmt(loss_at_time(dm, wa) if wa else None)} | {fmt(end(dm).get('train_loss'))} |")
    print("\nQK-Clip 50: head clips over the run (qk_clip_total) per learning rate:\n")
    for d in WIDTHS:
        s = sweep(f"optim/d{d}_muon_qkclip")
        if not s:
            continue
        runs = sorted(s["runs"], key=lambda r: float(r["overrides"][s["lr_key"]]))
        cells = []
        for r in runs:
            recs = [x for x in records(ROOT / f"optim/d{d}_muon_qkclip" / r["dir"]) if "qk_clip_total" in x]
            cells.append(f"{lr_text(r['overrides']['optim.lr'])}: {recs[-1]['qk_clip_total'] if recs else 'n/a'}")
        print(f"- d {d}: " + ", ".join(cells))


def finding12():
    print("\n## Finding 12 tables\n")
    print("Final val loss by epsilon (AdamW) and Adam-atan2, per width and learning rate:\n")
    epss = ["1e-06", "1e-08", "1e-10", "1e-12", "1e-15"]
    print("| width | lr | " + " | ".join(f"eps {e}" for e in epss) + " | adam_atan2 |")
    print("|---|---|" + "---|" * (len(epss) + 1))
    for d in WIDTHS:
        s, a = sweep(f"eps/d{d}_adamw_eps"), sweep(f"eps/d{d}_atan2")
        if not s:
            continue
        for lr in ["0.0022", "0.01", "0.046"]:
            cells = []
            for e in epss:
                r = [x for x in s["runs"] if float(x["overrides"]["optim.eps"]) == float(e)
                     and abs(float(x["overrides"]["optim.lr"]) / float(lr) - 1) < 0.05]
                cells.append("div" if r and r[0]["status"] == "diverged" else fmt(r[0]["final_val_loss"]) if r else "n/a")
            ra = [x for x in (a["runs"] if a else []) if abs(float(x["overrides"]["optim.lr"]) / float(lr) - 1) < 0.05]
            cells.append("div" if ra and ra[0]["status"] == "diverged" else fmt(ra[0]["final_val_loss"]) if ra else "n/a")
            print(f"| {d} | {lr} | " + " | ".join(cells) + " |")
    print("\nSpikes (doctor's loss spikes: a logged loss >= max(2 nats, 0.5 x the lowest before)) and "
          "final val loss, guards off, every step logged:\n")
    print("| width | lr | adamw, no clip | adamw, clip 1 | stable_adamw, no clip | stable_adamw, clip 1 |")
    print("|---|---|---|---|---|---|")
    for d in [128, 256]:
        s = sweep(f"eps/d{d}_spikes")
        if not s:
            continue
        for lr in ["0.046", "0.1", "0.22"]:
            cells = []
            for name, clip in [("adamw", "0"), ("adamw", "1"), ("stable_adamw", "0"), ("stable_adamw", "1")]:
                r = [x for x in s["runs"] if x["overrides"]["optim.name"] == name
                     and float(x["overrides"]["optim.grad_clip"]) == float(clip)
                     and abs(float(x["overrides"]["optim.lr"]) / float(lr) - 1) < 0.05]
                if not r:
                    cells.append("n/a")
                    continue
                recs = [x for x in records(ROOT / f"eps/d{d}_spikes" / r[0]["dir"]) if "event" not in x]
                lo, spikes = math.inf, 0
                for x in recs:
                    l = x.get("loss")
                    if l is None:
                        continue
                    if math.isfinite(lo) and l - lo >= max(2.0, 0.5 * lo):
                        spikes += 1
                    lo = min(lo, l)
                loss = "div" if r[0]["status"] == "diverged" else fmt(r[0]["final_val_loss"])
                cells.append(f"{spikes} spikes, {loss}")
            print(f"| {d} | {lr} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    finding11()
    finding12()
