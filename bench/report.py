"""Turns the JSON results of bench/run.sh into the table it prints and docs/benchmarks.md.

    python3 bench/report.py bench/results --out docs/benchmarks.md --command "bench/run.sh"

Medians over rounds; every number in the report comes from this run's files. bench/notes.md
(hand-written: the FLOP definition, what made the difference, the profile behind any missed target)
is appended as it is.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import re
import statistics
import subprocess
import sys

IMPLS = [("normlab", "normlab"), ("normlab_bf16", "normlab bf16"), ("eager", "torch eager"),
         ("compile", "torch.compile")]


def load(results):
    """{(kind, config): [result of round 1, round 2, ...]} in round order."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        # normlab_bf16 before normlab, or "normlab_bf16_a" would read as config "bf16_a"
        m = re.match(r"(sgemm_skx|sgemm|normlab_bf16|normlab|eager|compile)_(\w+?)_r(\d+)\.json$",
                     os.path.basename(path))
        if not m:
            continue
        kind, cfg, rnd = m.groups()
        try:
            with open(path) as f:
                text = f.read().strip().splitlines()
            j = json.loads(text[-1]) if text else {"error": "no output"}
        except (OSError, ValueError) as e:
            j = {"error": f"unreadable result: {e}"}
        j["_round"] = int(rnd)
        runs.setdefault((kind, cfg), []).append(j)
    for v in runs.values():
        v.sort(key=lambda j: j["_round"])
    return runs


def best_sgemm(*results):
    vals = [r.get(k) for r in results if r and "error" not in r
            for k in ("blas_gflops", "normlab_gemm_gflops", "dnnl_gflops")]
    vals = [v for v in vals if v]
    return max(vals) if vals else None


def med(runs, key):
    vals = [r[key] for r in runs if key in r and r.get(key) is not None and "error" not in r]
    return statistics.median(vals) if vals else None


def first_error(runs):
    for r in runs:
        if "error" in r:
            return r["error"]
    return None


def fmt(x, nd=0, unit=""):
    if x is None:
        return "n/a"
    return f"{x:,.{nd}f}{unit}"


def machine():
    model, cores, threads = platform.processor() or "unknown", os.cpu_count(), None
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        info = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        info = {k.strip(): v.strip() for k, v in info.items()}
        model = info.get("Model name", model)
        cores = info.get("CPU(s)", cores)
        threads = info.get("Thread(s) per core")
        flags = info.get("Flags", "")
    except (OSError, subprocess.CalledProcessError):
        flags = ""
    avx512 = "avx512f" in flags.split()
    return model, cores, threads, avx512


def targets(rows):
    """The issue's targets, each checked against this run's medians."""
    by = {r["config"]: r for r in rows}

    def tok(c, impl="normlab"):
        return by[c][impl]["tok"] if c in by else None

    def line(what, value, ok):
        verdict = "n/a" if ok is None else ("met" if ok else "**not met**")
        return f"| {what} | {value} | {verdict} |"

    out = ["## Targets\n", "| target | measured | |", "|---|---|---|"]
    for c in ("a", "b"):
        n, e, k = tok(c), tok(c, "eager"), tok(c, "compile")
        out.append(line(f"{c}: >= 1.5x PyTorch eager tok/s", f"{n / e:.2f}x" if n and e else "n/a",
                        n / e >= 1.5 if n and e else None))
        out.append(line(f"{c}: ahead of torch.compile", f"{n / k:.2f}x" if n and k else "n/a",
                        n > k if n and k else None))
    if "a" in by and by["a"]["mfu"]:
        out.append(line("a: MFU >= 70% of the sgemm rate of the same run",
                        f"{100 * by['a']['mfu']:.1f}%", by["a"]["mfu"] >= 0.70))
    def paired(c):
        """Median over rounds of c's tok/s over a's in the same round (normlab runs of one round
        follow each other within seconds; see run.sh)."""
        ra = {x["_round"]: x.get("tokens_per_s") for x in by["a"]["normlab"]["raw"]}
        rc = {x["_round"]: x.get("tokens_per_s") for x in by[c]["normlab"]["raw"]}
        rs = [rc[k] / ra[k] for k in sorted(set(ra) & set(rc)) if ra[k] and rc[k]]
        return (statistics.median(rs), rs) if rs else (None, [])

    for c in ("c", "c_matched"):
        a_, x = tok("a"), tok(c)
        if a_ and x:
            x_over_a, per_round = paired(c)
            if x_over_a is not None:
                a_, x = 1.0, x_over_a
            per_flop = (by[c]["gflops"] / by["a"]["gflops"]) if by[c]["gflops"] and by["a"]["gflops"] else None
            extra = (f"; model FLOP/s {100 * per_flop:.0f}% of a's ({by[c]['flops_per_token'] / by['a']['flops_per_token']:.2f}x a's FLOPs per token)"
                     if per_flop else "")
            rounds_txt = (" (per round: " + ", ".join(f"{100 * v:.0f}%" for v in per_round) + ")"
                          if per_round else "")
            out.append(line(f"{c}: tok/s within 10% of a's", f"{100 * x / a_:.1f}% of a{rounds_txt}{extra}",
                            x >= 0.9 * a_))
    for r in rows:
        n, e, k = r["normlab"]["rss"], r["eager"]["rss"], r["compile"]["rss"]
        peers = [v for v in (e, k) if v]
        if n and peers:
            out.append(line(f"{r['config']}: peak RSS <= PyTorch's", f"{n:,.0f} MiB vs "
                            + " / ".join(f"{v:,.0f}" for v in (e, k) if v) + " MiB (eager / compile)",
                            n <= min(peers)))
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--configs", nargs="*", default=["a", "b", "c", "c_matched"])
    a = ap.parse_args()
    runs = load(a.results)
    rounds = max((len(v) for v in runs.values()), default=0)

    rows, details = [], []
    # one BLAS label for every config, so that the sgemm table's columns line up
    blas_label = next((x["blas"] for (kind, _), v in runs.items() if kind == "sgemm" for x in v
                       if x.get("blas")), "OpenBLAS")
    for c in a.configs:
        nl = runs.get(("normlab", c), [])
        r = {"config": c}
        for kind, _ in IMPLS:
            rr = runs.get((kind, c), [])
            r[kind] = {"tok": med(rr, "tokens_per_s"), "ms": med(rr, "step_ms_median"),
                       "rss": med(rr, "peak_rss_mb"), "err": first_error(rr),
                       "base": (med(rr, "baseline_rss_mb") if kind.startswith("normlab")
                                else med(rr, "imported_rss_mb")),
                       "per_round": [x.get("tokens_per_s") for x in rr],
                       "first": med(rr, "first_step_ms"),
                       "loss_last": med(rr, "loss_last"),
                       "losses": next((x["losses"] for x in rr if x.get("losses")), None),
                       "raw": [x for x in rr if "error" not in x],
                       "ran": bool(rr)}
        sg = runs.get(("sgemm", c), [])
        sk = runs.get(("sgemm_skx", c), [])
        rates = {blas_label + " (as linked)": med(sg, "blas_gflops"),
                 "OpenBLAS (core SkylakeX, forced)": med(sk, "blas_gflops"),
                 "normlab gemm": med(sg, "normlab_gemm_gflops")}
        if med(sg, "dnnl_gflops"):
            rates["oneDNN sgemm"] = med(sg, "dnnl_gflops")
        if med(sg, "normlab_bf16_gflops"):  # bf16 inputs: not part of the MFU's best rate
            rates["normlab gemm_bf16 (bf16 inputs)"] = med(sg, "normlab_bf16_gflops")
        r["rates"] = rates
        r["gflops"] = med(nl, "gflops")
        # MFU per round, against the best sgemm of the same round (measured minutes apart, not
        # hours), then the median over rounds.
        by_round = {x["_round"]: x for x in sg}
        by_round_skx = {x["_round"]: x for x in sk}
        mfus = []
        for x in nl:
            if "error" in x or not x.get("gflops"):
                continue
            b = best_sgemm(by_round.get(x["_round"]), by_round_skx.get(x["_round"]))
            if b:
                mfus.append(x["gflops"] / b)
        r["mfu"] = statistics.median(mfus) if mfus else None
        r["mfu_rounds"] = mfus
        bests = [b for b in (best_sgemm(by_round.get(k), by_round_skx.get(k))
                             for k in sorted(set(by_round) | set(by_round_skx))) if b]
        r["best"] = statistics.median(bests) if bests else None
        r["desc"] = nl[0].get("description") if nl and "description" in nl[0] else ""
        r["flops_per_token"] = med(nl, "flops_per_token")
        r["split"] = {k: med(nl, k + "_ms_median") for k in ("forward", "backward", "optimizer")}
        r["cpu_ms"] = med(nl, "cpu_ms_median")
        rows.append(r)
        details.append((c, sg))

    def ratio(x, y):
        return f"{x / y:.2f}x" if x and y else "n/a"

    head = ("| config | normlab tok/s | torch eager tok/s | torch.compile tok/s | vs eager | vs compile "
            "| normlab GFLOP/s | sgemm GFLOP/s (best) | MFU | peak RSS MiB normlab / eager / compile |")
    sep = "|" + "---|" * 10
    lines = [head, sep]
    for r in rows:
        n, e, k = r["normlab"], r["eager"], r["compile"]
        comp = fmt(k["tok"]) if not k["err"] else "error"
        lines.append(
            f"| {r['config']} | {fmt(n['tok'])} | {fmt(e['tok'])} | {comp} | {ratio(n['tok'], e['tok'])} "
            f"| {ratio(n['tok'], k['tok'])} | {fmt(r['gflops'], 1)} | {fmt(r['best'], 1)} "
            f"| {fmt(100 * r['mfu'] if r['mfu'] else None, 1, '%')} "
            f"| {fmt(n['rss'])} / {fmt(e['rss'])} / {fmt(k['rss'])} |")
    table = "\n".join(lines)

    model, cores, tpc, avx512 = machine()
    torch_v = next((x.get("torch") for (kind, _), v in runs.items() if kind == "eager" for x in v
                    if x.get("torch")), "n/a")
    stamps = [os.path.getmtime(f) for f in glob.glob(os.path.join(a.results, "*.json"))]
    span = (datetime.datetime.fromtimestamp(min(stamps)), datetime.datetime.fromtimestamp(max(stamps))) \
        if stamps else (datetime.datetime.now(),) * 2
    now = f"{span[0]:%Y-%m-%d %H:%M} to {span[1]:%H:%M}"
    out = []
    out.append("# Benchmarks: training throughput, normlab vs PyTorch\n")
    out.append(f"Generated by `{a.command}` on {now}; medians over {rounds} round(s), each round "
               "running every configuration and implementation once, in turn, each in a fresh process.\n")
    out.append(f"- Machine: {model}, {cores} CPU(s) (`lscpu`; threads per core: {tpc or 'n/a'}; "
               f"AVX-512: {'yes' if avx512 else 'no'}), Linux {platform.release()}")
    out.append(f"- PyTorch {torch_v} (CPU), `torch.set_num_threads` = normlab's threads, "
               "`OMP_WAIT_POLICY=PASSIVE`; fused AdamW")
    out.append("- Step: zero grad, forward with loss, backward, global-norm clipping (1.0), AdamW; "
               "float32 (normlab bf16: the linear layers' and the LM head's products with bf16 "
               "inputs and fp32 accumulation, everything else float32); random token batches\n")
    out.append("## Results\n")
    out.append(table + "\n")
    out.append("MFU = normlab's model FLOP/s over the best sgemm rate measured in the same round on "
               "the model's own GEMM shapes (see below), median over rounds ("
               + "; ".join(f"{r['config']}: " + ", ".join(f"{100 * m:.0f}%" for m in r["mfu_rounds"])
                           for r in rows)
               + " per round); the sgemm column is the median of the best rate per round. "
               "FLOPs per token = 6 x matmul weights + 12 x L x T x C (see Definitions).\n")
    out.append(targets(rows) + "\n")
    out.append("| config | model |\n|---|---|")
    for r in rows:
        out.append(f"| {r['config']} | {r['desc']} |")
    out.append("")

    out.append("## Details\n")
    out.append("| config | impl | tok/s per round | vs eager | step ms | first step ms | peak RSS MiB | "
               "RSS before the model MiB | error |")
    out.append("|" + "---|" * 9)
    for r in rows:
        for kind, label in IMPLS:
            x = r[kind]
            if kind == "normlab_bf16" and not x["ran"]:
                continue  # results from before the bf16 runs existed
            pr = ", ".join(fmt(t) for t in x["per_round"] if t) or "n/a"
            err = (x["err"] or "").replace("|", "/")[:200]
            vs = ratio(x["tok"], r["eager"]["tok"]) if kind != "eager" else ""
            out.append(f"| {r['config']} | {label} | {pr} | {vs} | {fmt(x['ms'], 1)} | {fmt(x['first'], 1)} "
                       f"| {fmt(x['rss'])} | {fmt(x['base'])} | {err} |")
    out.append("")
    if any(r["normlab_bf16"]["ran"] for r in rows):
        out.append("normlab with bf16 matrix products (`--precision bf16`, `train.matmul_precision = "
                   "\"bf16\"`): tok/s (median over rounds) against normlab float32 and torch eager, "
                   "and the loss after the short run's last step (random tokens; the same batches "
                   "and initialisation in both precisions).\n")
        out.append("| config | bf16 tok/s | vs normlab float32 | vs eager | last loss bf16 | "
                   "last loss float32 | difference | mean loss over the steps, bf16 / float32 "
                   "| largest per-step difference |")
        out.append("|" + "---|" * 9)
        for r in rows:
            b, n = r["normlab_bf16"], r["normlab"]
            if not b["ran"]:
                continue
            if b["err"] and not b["tok"]:
                out.append(f"| {r['config']} | error: {b['err'].replace('|', '/')[:120]} | | | | | |")
                continue
            diff = (f"{b['loss_last'] - n['loss_last']:+.2e}"
                    if b["loss_last"] is not None and n["loss_last"] is not None else "n/a")
            mean_txt, worst_txt = "n/a", "n/a"
            lb, lf = b["losses"], n["losses"]
            if lb and lf and len(lb) == len(lf):
                mean_txt = f"{statistics.mean(lb):.4f} / {statistics.mean(lf):.4f}"
                k = max(range(len(lb)), key=lambda i: abs(lb[i] - lf[i]))
                worst_txt = f"{lb[k] - lf[k]:+.2e} (step {k + 1} of {len(lb)})"
            out.append(f"| {r['config']} | {fmt(b['tok'])} | {ratio(b['tok'], n['tok'])} "
                       f"| {ratio(b['tok'], r['eager']['tok'])} | {fmt(b['loss_last'], 5)} "
                       f"| {fmt(n['loss_last'], 5)} | {diff} | {mean_txt} | {worst_txt} |")
        out.append("")
    out.append("normlab step split (ms, median): forward = zero grad + forward + loss + head gradient; "
               "backward = the body; optimizer = clipping + AdamW. CPU ms = process CPU time per "
               "step (all threads).\n")
    out.append("| config | forward | backward | optimizer | step | CPU ms |\n|---|---|---|---|---|---|")
    for r in rows:
        s = r["split"]
        out.append(f"| {r['config']} | {fmt(s['forward'], 1)} | {fmt(s['backward'], 1)} | "
                   f"{fmt(s['optimizer'], 1)} | {fmt(r['normlab']['ms'], 1)} | {fmt(r['cpu_ms'], 1)} |")
    out.append("")
    out.append("sgemm on each model's GEMM shapes (FLOP-weighted over one training step: every "
               "linear layer forward, dx and dW, and the LM head), GFLOP/s, median over rounds:\n")
    # columns: every rate any config has (oneDNN and bf16 only where measured)
    rate_keys = list(dict.fromkeys(k for r in rows for k in r["rates"]))
    out.append("| config | " + " | ".join(rate_keys) + " |")
    out.append("|---|" + "---|" * len(rate_keys))
    for r in rows:
        out.append(f"| {r['config']} | " + " | ".join(fmt(r["rates"].get(k), 1) for k in rate_keys) + " |")
    out.append("")
    for c, sg in details:
        if not sg or "shapes" not in sg[0]:
            continue
        out.append(f"<details><summary>config {c}: per shape (first round)</summary>\n")
        dn = "dnnl_gflops" in sg[0]["shapes"][0]
        bf = "bf16_gflops" in sg[0]["shapes"][0]
        out.append("| GEMM | ta | tb | M | N | K | per step | OpenBLAS GFLOP/s | normlab GFLOP/s |"
                   + (" oneDNN GFLOP/s |" if dn else "") + (" normlab bf16 GFLOP/s |" if bf else ""))
        out.append("|" + "---|" * (9 + dn + bf))
        for s in sg[0]["shapes"]:
            out.append(f"| {s['what']} | {int(s['ta'])} | {int(s['tb'])} | {s['M']} | {s['N']} | "
                       f"{s['K']} | {s['count']} | {s['blas_gflops']:.1f} | {s['normlab_gflops']:.1f} |"
                       + (f" {s['dnnl_gflops']:.1f} |" if dn else "")
                       + (f" {s['bf16_gflops']:.1f} |" if bf else ""))
        out.append("\n</details>\n")

    # bench/gqa.sh's and bench/tokenizers.sh's sections live in the same file: keep them when
    # rewriting the rest.
    if os.path.exists(a.out):
        with open(a.out) as f:
            old = f.read()
        for heading in ("\n## Grouped-query attention\n", "\n## Tokenizers\n"):
            start = old.find(heading)
            if start >= 0:
                end = old.find("\n## ", start + 1)
                out.append(old[start + 1:end if end >= 0 else len(old)].rstrip() + "\n")

    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            out.append(f.read())
    text = "\n".join(out).rstrip() + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(table)
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
