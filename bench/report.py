"""Turns the JSON results of bench/run.sh into the table it prints and docs/benchmarks.md.

    python3 bench/report.py build/bench-results --out docs/benchmarks.md --command "bench/run.sh"
    python3 bench/report.py --per-cpu-only --out docs/benchmarks.md   # only "Results per CPU"

Medians over rounds; every number in the run's sections comes from this run's files. The run's
summary also goes to the per-CPU store (--store, default bench/results/<cpu key>.json, one file per
CPU, replacing that CPU's earlier file; --no-store skips writing), and the report opens with one
table per stored CPU ("Results per CPU"). The CPU is read from the results' cpu.json
(bench/cpuinfo.py, written by run.sh), or from the machine the report runs on when there is none.
bench/notes.md (hand-written: the FLOP definition, what made the difference, the profile behind any
missed target) is appended as it is.
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
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpuinfo  # noqa: E402  (bench/cpuinfo.py)

IMPLS = [("normlab", "normlab"), ("normlab_bf16", "normlab bf16"), ("eager", "torch eager"),
         ("compile", "torch.compile"), ("autocast", "torch autocast bf16 eager"),
         ("autocast_compile", "torch autocast bf16 compile")]
# Kinds that older results (or AUTOCAST=0 / COMPILE=0) may lack: their rows are left out then.
OPTIONAL = ("normlab_bf16", "autocast", "autocast_compile")
STORE_DEFAULT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load(results):
    """{(kind, config): [result of round 1, round 2, ...]} in round order."""
    runs = {}
    for path in sorted(glob.glob(os.path.join(results, "*.json"))):
        # normlab_bf16 before normlab, or "normlab_bf16_a" would read as config "bf16_a" (and
        # autocast_compile before autocast)
        m = re.match(r"(sgemm_skx|sgemm|normlab_bf16|normlab|eager|compile|autocast_compile|autocast)"
                     r"_(\w+?)_r(\d+)\.json$",
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


def load_cpu(results):
    """The CPU of the run: the results' cpu.json (run.sh), else this machine (bench/cpuinfo.py)."""
    path = os.path.join(results, "cpu.json") if results else None
    if path and os.path.exists(path):
        try:
            with open(path) as f:
                info = json.load(f)
            info.setdefault("generation", cpuinfo.generation(info.get("vendor"), info.get("family"),
                                                             info.get("model"), info.get("flags")))
            info.setdefault("key", cpuinfo.cpu_key(info))
            return info, "cpu.json"
        except (OSError, ValueError) as e:
            print(f"report.py: {path} unreadable ({e}); reading this machine's CPU", file=sys.stderr)
    return cpuinfo.collect(), "read when the report was made"


def cpu_label(info):
    """Short name for range sentences: the generation, else the model name with family/model."""
    if cpuinfo.known_generation(info):
        return info["generation"]
    return f"{info.get('model_name') or 'unknown CPU'} ({info.get('generation')})"


def rnd(x, nd):
    return None if x is None else round(x, nd)


def ratio_of(x, y):
    return x / y if x and y else None


def summarise(rows):
    """Per config, what the per-CPU store keeps: medians over rounds, ratios of those medians,
    MFU with its per-round values, the GEMM rates, and the error of a kind that never succeeded."""
    out = {}
    for r in rows:
        if not any(r[kind]["ran"] for kind, _ in IMPLS):
            continue  # a config this run did not measure
        tok = {name: r[kind]["tok"] for kind, name in (
            ("normlab", "normlab_fp32"), ("normlab_bf16", "normlab_bf16"), ("eager", "eager"),
            ("compile", "compile"), ("autocast", "autocast_eager"),
            ("autocast_compile", "autocast_compile"))}
        ratios = {
            "fp32_vs_eager": ratio_of(tok["normlab_fp32"], tok["eager"]),
            "fp32_vs_compile": ratio_of(tok["normlab_fp32"], tok["compile"]),
            "bf16_vs_autocast_eager": ratio_of(tok["normlab_bf16"], tok["autocast_eager"]),
            "bf16_vs_autocast_compile": ratio_of(tok["normlab_bf16"], tok["autocast_compile"]),
            "bf16_vs_fp32": ratio_of(tok["normlab_bf16"], tok["normlab_fp32"]),
        }
        errors = {kind: r[kind]["err"] for kind, _ in IMPLS if r[kind]["err"] and not r[kind]["tok"]}
        out[r["config"]] = {
            "tok_s": {k: rnd(v, 1) for k, v in tok.items()},
            "ratios": {k: rnd(v, 4) for k, v in ratios.items()},
            "mfu_fp32": rnd(r["mfu"], 4),
            "mfu_fp32_rounds": [round(m, 4) for m in r["mfu_rounds"]],
            "mfu_bf16": rnd(r["mfu_bf16"], 4),
            "mfu_bf16_rounds": [round(m, 4) for m in r["mfu_bf16_rounds"]],
            "gflops": {"fp32": rnd(r["gflops"], 1), "bf16": rnd(r["gflops_bf16"], 1)},
            "sgemm_best_gflops": rnd(r["best"], 1),
            "gemm_bf16_gflops": rnd(r["bf16_rate"], 1),
            "errors": errors,
        }
        kernel = next((x.get("bf16_kernel") for x in r["normlab_bf16"]["raw"] if x.get("bf16_kernel")),
                      None)
        if kernel:  # which kernel normlab bf16 ran (AVX512-BF16, or the float32 one on rounded copies)
            out[r["config"]]["bf16_kernel"] = kernel
    return out


def supersedes(new, old):
    """Whether the record `new` replaces the stored `old`: the same CPU key, or an older record
    whose CPU model was not known (transcribed) with the same vendor, family and model name."""
    n, o = new["cpu"], old.get("cpu", {})
    if n.get("key") and n.get("key") == o.get("key"):
        return True
    return (o.get("model") is None and n.get("model") is not None
            and all(n.get(k) == o.get(k) and o.get(k) is not None
                    for k in ("vendor", "family", "model_name")))


def read_store(store):
    """[(path, record)] of every per-CPU file in the store."""
    recs = []
    for path in sorted(glob.glob(os.path.join(store, "*.json"))):
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, ValueError) as e:
            print(f"report.py: skipping {path}: {e}", file=sys.stderr)
            continue
        if isinstance(rec, dict) and "cpu" in rec and "configs" in rec:
            recs.append((path, rec))
    return recs


def write_store(store, record):
    """Writes <key>.json and removes the files the record supersedes; returns the path."""
    os.makedirs(store, exist_ok=True)
    path = os.path.join(store, record["cpu"]["key"] + ".json")
    for old_path, old in read_store(store):
        if os.path.abspath(old_path) != os.path.abspath(path) and supersedes(record, old):
            os.remove(old_path)
            print(f"report.py: {record['cpu']['key']} replaces {os.path.basename(old_path)}",
                  file=sys.stderr)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
    return path


def span_text(span):
    start, end = span.get("start") or "?", span.get("end") or "?"
    if start[:10] == end[:10]:
        end = end[11:]
    return f"{start} to {end}"


PER_CPU_COLS = [
    ("normlab fp32 tok/s", "tok", "normlab_fp32"), ("eager", "tok", "eager"),
    ("compile", "tok", "compile"), ("fp32 vs eager", "ratio", "fp32_vs_eager"),
    ("fp32 vs compile", "ratio", "fp32_vs_compile"), ("MFU fp32", "mfu", "mfu_fp32"),
    ("normlab bf16 tok/s", "tok", "normlab_bf16"), ("autocast eager", "tok", "autocast_eager"),
    ("autocast compile", "tok", "autocast_compile"),
    ("bf16 vs autocast eager", "ratio", "bf16_vs_autocast_eager"),
    ("bf16 vs autocast compile", "ratio", "bf16_vs_autocast_compile"), ("MFU bf16", "mfu", "mfu_bf16")]
# tok/s key -> the run kind whose error explains a missing value
TOK_KIND = {"normlab_fp32": "normlab", "normlab_bf16": "normlab_bf16", "eager": "eager",
            "compile": "compile", "autocast_eager": "autocast", "autocast_compile": "autocast_compile"}
RANGES = [("fp32_vs_eager", "normlab float32 vs PyTorch eager"),
          ("fp32_vs_compile", "normlab float32 vs torch.compile"),
          ("bf16_vs_autocast_eager", "normlab bf16 vs PyTorch autocast bf16 eager"),
          ("bf16_vs_autocast_compile", "normlab bf16 vs PyTorch autocast bf16 compile")]


def per_cpu_table(rec):
    lines = ["| config | " + " | ".join(c[0] for c in PER_CPU_COLS) + " |",
             "|---|" + "---|" * len(PER_CPU_COLS)]
    for cfg, v in rec["configs"].items():
        cells = []
        errors = v.get("errors") or {}
        for _, what, key in PER_CPU_COLS:
            if what == "tok":
                x = v["tok_s"].get(key)
                cells.append("error" if x is None and TOK_KIND[key] in errors else fmt(x))
            elif what == "ratio":
                x = v["ratios"].get(key)
                cells.append(f"{x:.2f}x" if x is not None else "n/a")
            else:
                x = v.get(key)
                cells.append(f"{100 * x:.1f}%" if x is not None else "n/a")
        lines.append(f"| {cfg} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def range_sentence(records, what, key, pct=False):
    vals, cpus = [], []
    for rec in records:
        label = cpu_label(rec["cpu"])
        got = False
        for cfg, v in rec["configs"].items():
            x = v.get(key) if pct else v["ratios"].get(key)
            if x is not None:
                vals.append((x, cfg, label))
                got = True
        if got:
            cpus.append(label)
    if not vals:
        return f"- {what}: not measured on any stored CPU."
    show = (lambda x: f"{100 * x:.1f}%") if pct else (lambda x: f"{x:.2f}x")
    lo, hi = min(vals), max(vals)
    n = len(cpus)
    over = f"over {n} CPU{'s' if n != 1 else ''} ({', '.join(cpus)})"
    if len(vals) == 1:
        return f"- {what}: {show(lo[0])} ({lo[1]}, {lo[2]}), the only measurement {over}."
    return f"- {what}: {show(lo[0])} ({lo[1]}, {lo[2]}) to {show(hi[0])} ({hi[1]}, {hi[2]}) {over}."


def kernel_note(kernel):
    """What normlab's bf16 kernel name (normlab_bench's "bf16_kernel") means, for the per-CPU
    notes: AMX tiles, or the fallback without native bf16 dot products."""
    if kernel == "amx":
        return "amx (AMX tiles, tdpbf16ps)"
    if kernel == "avx512bf16":
        return "avx512bf16 (vdpbf16ps)"
    return (f"{kernel} (no AVX512-BF16: the bf16 contract at float32 speed; "
            "`train.matmul_precision = \"auto\"` picks float32 here)")


def per_cpu_section(records):
    """"## Results per CPU": one heading and table per stored CPU, newest first, then the ranges."""
    records = sorted(records, key=lambda r: (r.get("span") or {}).get("end") or "", reverse=True)
    out = ["## Results per CPU\n",
           "One table per CPU that `bench/run.sh` has run on (`bench/results/<cpu key>.json`, newest "
           "first): tok/s are medians over rounds, the ratios are ratios of those medians, \"n/a\" "
           "where not measured.\n"]
    for rec in records:
        cpu = rec["cpu"]
        span = rec.get("span") or {}
        out.append(f"### {(span.get('end') or '?')[:10]}: {cpuinfo.describe(cpu)}\n")
        extra = []
        if cpu.get("cpus"):
            extra.append(f"{cpu['cpus']} CPU(s)"
                         + (f", {cpu['threads_per_core']} thread(s) per core"
                            if cpu.get("threads_per_core") else ""))
        out.append(f"`{rec.get('command') or 'bench/run.sh'}`, {span_text(span)}; "
                   f"{rec.get('rounds', 'n/a')} round(s), {rec.get('threads', 'n/a')} threads, "
                   f"PyTorch {rec.get('torch') or 'n/a'}; " + "; ".join(extra + [f"key `{cpu.get('key')}`"])
                   + ".\n")
        if rec.get("source"):
            out.append(f"*{rec['source'].rstrip('.')}.*" + (f" {rec['note']}" if rec.get("note") else "")
                       + "\n")
        out.append(per_cpu_table(rec) + "\n")
        kernels = sorted({v["bf16_kernel"] for v in rec["configs"].values() if v.get("bf16_kernel")})
        if kernels and kernels != ["avx512bf16"]:
            out.append("normlab bf16 on this CPU: " + ", ".join(kernel_note(k) for k in kernels) + ".\n")
    out.append("Over the stored CPUs (every config; in brackets the config and CPU of each end):\n")
    for key, what in RANGES:
        out.append(range_sentence(records, what, key))
    out.append(range_sentence(records, "MFU float32", "mfu_fp32", pct=True))
    out.append(range_sentence(records, "MFU bf16", "mfu_bf16", pct=True))
    out.append("")
    out.append(MFU_DEFINITION + "\n")
    return "\n".join(out)


MFU_DEFINITION = (
    "**MFU float32** = normlab float32's model FLOP/s over the best float32 sgemm rate measured in "
    "the same round on the model's own GEMM shapes (OpenBLAS as linked, OpenBLAS with its SkylakeX "
    "kernel forced, normlab's gemm, oneDNN where built), median over rounds. **MFU bf16** = normlab "
    "bf16's model FLOP/s over normlab's gemm_bf16 rate (bf16 inputs, fp32 accumulation) measured in "
    "the same round on the same shapes, median over rounds: how close training comes to its own bf16 "
    "kernel, not to a hardware peak. Model FLOPs per token = 6 x matmul weights + 12 x L x T x C "
    "(see Definitions), the same for every implementation.")

INTRO = ("normlab's training throughput against PyTorch on the same CPU: float32 against eager and "
         "torch.compile, bf16 matrix products against PyTorch's own bf16 autocast.\n"
         "\"Results per CPU\" sums up every CPU that `bench/run.sh` has run on; the sections after "
         "it show the latest run in detail,\n"
         "then come the definitions, what made the difference and the remaining gaps.\n")
TITLE = "# Benchmarks: training throughput, normlab vs PyTorch\n"


def splice_per_cpu(text, section):
    """Replaces the "## Results per CPU" section of an existing report (up to the next "## "), or
    puts it, with the intro, right after the title."""
    start = text.find("\n## Results per CPU\n")
    if start >= 0:
        end = text.find("\n## ", start + 1)
        return text[:start + 1] + section.rstrip() + "\n" + (text[end:] if end >= 0 else "")
    nl = text.find("\n")
    title, rest = (text[:nl + 1], text[nl + 1:]) if text.startswith("# ") else (TITLE, text)
    return title + "\n" + INTRO + "\n" + section.rstrip() + "\n" + rest


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
    # Performance II: float32 MFU against the same run's sgemm rate (per round in brackets).
    for c, goal in (("a", 0.90), ("b", 0.85), ("c", 0.90)):
        if c in by and by[c]["mfu"]:
            rounds_txt = ", ".join(f"{100 * m:.0f}%" for m in by[c]["mfu_rounds"])
            out.append(line(f"{c}: MFU >= {100 * goal:.0f}% of the sgemm rate of the same run (float32)",
                            f"{100 * by[c]['mfu']:.1f}% (per round: {rounds_txt})", by[c]["mfu"] >= goal))
    def paired(c):
        """Median over rounds of c's tok/s over a's in the same round (see run.sh for how far apart
        a round's runs are)."""
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
        b = r["normlab_bf16"]["tok"]
        for kind, label in (("autocast", "eager"), ("autocast_compile", "compile")):
            x = r[kind]["tok"]
            out.append(line(f"{r['config']}: normlab bf16 ahead of torch autocast bf16 {label}",
                            f"{b / x:.2f}x" if b and x else "n/a", b > x if b and x else None))
    for r in rows:
        n, e, k = r["normlab"]["rss"], r["eager"]["rss"], r["compile"]["rss"]
        peers = [v for v in (e, k) if v]
        if n and peers:
            out.append(line(f"{r['config']}: peak RSS <= PyTorch's", f"{n:,.0f} MiB vs "
                            + " / ".join(f"{v:,.0f}" for v in (e, k) if v) + " MiB (eager / compile)",
                            n <= min(peers)))
    return "\n".join(out)


def mfu_per_round(train, rate):
    """[model GFLOP/s over rate(round)] for each training run that succeeded, in round order;
    rounds without a rate are left out."""
    out = []
    for x in train:
        if "error" in x or not x.get("gflops"):
            continue
        b = rate(x["_round"])
        if b:
            out.append(x["gflops"] / b)
    return out


def compute_rows(runs, configs):
    rows, details = [], []
    # one BLAS label for every config, so that the sgemm table's columns line up
    blas_label = next((x["blas"] for (kind, _), v in runs.items() if kind == "sgemm" for x in v
                       if x.get("blas")), "OpenBLAS")
    for c in configs:
        nl = runs.get(("normlab", c), [])
        nb = runs.get(("normlab_bf16", c), [])
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
                       "steps": sorted({(x.get("steps"), x.get("warmup")) for x in rr
                                        if "error" not in x and x.get("steps") is not None}),
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
        r["gflops_bf16"] = med(nb, "gflops")
        # MFU per round, against a GEMM rate of the same round (measured minutes apart, not hours),
        # then the median over rounds. float32: the best sgemm; bf16: normlab's gemm_bf16 (the
        # sgemm run's normlab_bf16_gflops).
        by_round = {x["_round"]: x for x in sg}
        by_round_skx = {x["_round"]: x for x in sk}

        def bf16_rate(k):
            s = by_round.get(k)
            return s.get("normlab_bf16_gflops") if s and "error" not in s else None

        r["mfu_rounds"] = mfu_per_round(
            nl, lambda k: best_sgemm(by_round.get(k), by_round_skx.get(k)))
        r["mfu"] = statistics.median(r["mfu_rounds"]) if r["mfu_rounds"] else None
        r["mfu_bf16_rounds"] = mfu_per_round(nb, bf16_rate)
        r["mfu_bf16"] = statistics.median(r["mfu_bf16_rounds"]) if r["mfu_bf16_rounds"] else None
        r["bf16_rate"] = med(sg, "normlab_bf16_gflops")
        bests = [b for b in (best_sgemm(by_round.get(k), by_round_skx.get(k))
                             for k in sorted(set(by_round) | set(by_round_skx))) if b]
        r["best"] = statistics.median(bests) if bests else None
        r["desc"] = nl[0].get("description") if nl and "description" in nl[0] else ""
        r["flops_per_token"] = med(nl, "flops_per_token")
        r["split"] = {k: med(nl, k + "_ms_median") for k in ("forward", "backward", "optimizer")}
        r["cpu_ms"] = med(nl, "cpu_ms_median")
        rows.append(r)
        details.append((c, sg))
    return rows, details


def ratio(x, y):
    v = ratio_of(x, y)
    return f"{v:.2f}x" if v else "n/a"


def pct_rounds(vals):
    return ", ".join(f"{100 * m:.0f}%" for m in vals) or "n/a"


def run_sections(rows, details, runs, cpu, cpu_source, command, now, rounds, torch_v):
    """The latest run in detail: headed with its CPU, then Results, Targets, Details, ..."""
    out = []
    out.append(f"## Latest run: {cpuinfo.describe(cpu, with_flags=False)}\n")
    out.append(f"Generated by `{command}` on {now}; medians over {rounds} round(s), each round "
               "running every configuration and implementation once, each in a fresh process, a "
               "configuration's runs back to back.\n")
    tpc = cpu.get("threads_per_core")
    out.append(f"- Machine: {cpuinfo.describe(cpu)}; {cpu.get('cpus') or 'n/a'} CPU(s), threads per "
               f"core: {tpc or 'n/a'} (bench/cpuinfo.py, {cpu_source}; key `{cpu.get('key')}`), "
               f"Linux {platform.release()}")
    out.append(f"- PyTorch {torch_v} (CPU), `torch.set_num_threads` = normlab's threads, "
               "`OMP_WAIT_POLICY=PASSIVE`; fused AdamW; autocast runs: `torch.autocast(\"cpu\", "
               "dtype=torch.bfloat16)` around forward and loss, float32 master weights")
    out.append("- Step: zero grad, forward with loss, backward, global-norm clipping (1.0), AdamW; "
               "float32 (normlab bf16: the linear layers' and the LM head's products with bf16 "
               "inputs and fp32 accumulation, everything else float32); random token batches\n")

    head = ("| config | normlab tok/s | torch eager tok/s | torch.compile tok/s | vs eager | vs compile "
            "| normlab GFLOP/s | sgemm GFLOP/s (best) | MFU | MFU bf16 "
            "| peak RSS MiB normlab / eager / compile |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        n, e, k = r["normlab"], r["eager"], r["compile"]
        comp = fmt(k["tok"]) if not k["err"] else "error"
        lines.append(
            f"| {r['config']} | {fmt(n['tok'])} | {fmt(e['tok'])} | {comp} | {ratio(n['tok'], e['tok'])} "
            f"| {ratio(n['tok'], k['tok'])} | {fmt(r['gflops'], 1)} | {fmt(r['best'], 1)} "
            f"| {fmt(100 * r['mfu'] if r['mfu'] else None, 1, '%')} "
            f"| {fmt(100 * r['mfu_bf16'] if r['mfu_bf16'] else None, 1, '%')} "
            f"| {fmt(n['rss'])} / {fmt(e['rss'])} / {fmt(k['rss'])} |")
    table = "\n".join(lines)
    out.append("## Results\n")
    out.append(table + "\n")
    out.append("MFU = normlab float32's model FLOP/s over the best sgemm rate measured in the same "
               "round on the model's own GEMM shapes (see below), median over rounds ("
               + "; ".join(f"{r['config']}: {pct_rounds(r['mfu_rounds'])}" for r in rows)
               + " per round); the sgemm column is the median of the best rate per round. "
               "MFU bf16 = normlab bf16's model FLOP/s over normlab's gemm_bf16 rate (bf16 inputs, "
               "fp32 accumulation) of the same round on the same shapes, median over rounds ("
               + "; ".join(f"{r['config']}: {pct_rounds(r['mfu_bf16_rounds'])}" for r in rows)
               + " per round). FLOPs per token = 6 x matmul weights + 12 x L x T x C (see Definitions).\n")
    out.append(targets(rows) + "\n")
    out.append("| config | model |\n|---|---|")
    for r in rows:
        out.append(f"| {r['config']} | {r['desc']} |")
    out.append("")

    out.append("## Details\n")
    out.append("| config | impl | tok/s per round | vs eager | step ms | first step ms | timed steps "
               "(warm-up) | peak RSS MiB | RSS before the model MiB | error |")
    out.append("|" + "---|" * 10)
    for r in rows:
        for kind, label in IMPLS:
            x = r[kind]
            if kind in OPTIONAL and not x["ran"]:
                continue  # results from before these runs existed, or AUTOCAST=0 / COMPILE=0
            pr = ", ".join(fmt(t) for t in x["per_round"] if t) or "n/a"
            err = (x["err"] or "").replace("|", "/")[:200]
            vs = ratio(x["tok"], r["eager"]["tok"]) if kind != "eager" else ""
            st = ", ".join(f"{s} ({w})" for s, w in x["steps"]) or "n/a"
            out.append(f"| {r['config']} | {label} | {pr} | {vs} | {fmt(x['ms'], 1)} | {fmt(x['first'], 1)} "
                       f"| {st} | {fmt(x['rss'])} | {fmt(x['base'])} | {err} |")
    out.append("")
    if any(r[k]["ran"] for r in rows for k in OPTIONAL):
        out.append("normlab with bf16 matrix products (`--precision bf16`, `train.matmul_precision = "
                   "\"bf16\"`) against PyTorch's own bf16 autocast (eager and compiled) and normlab "
                   "float32: tok/s (medians over rounds), and the loss after the short run's last "
                   "step (random tokens; normlab's two precisions see the same batches and "
                   "initialisation, PyTorch's runs other ones, the same in all its runs).\n")
        out.append("| config | bf16 tok/s | vs autocast eager | vs autocast compile | vs normlab float32 "
                   "| last loss bf16 | last loss float32 | difference | mean loss over the steps, "
                   "bf16 / float32 | largest per-step difference | last loss torch autocast eager / "
                   "autocast compile / float32 eager |")
        out.append("|" + "---|" * 11)
        for r in rows:
            b, n = r["normlab_bf16"], r["normlab"]
            ae, ak = r["autocast"], r["autocast_compile"]
            if not (b["ran"] or ae["ran"] or ak["ran"]):
                continue
            torch_losses = " / ".join(
                "error" if x["err"] and x["loss_last"] is None else fmt(x["loss_last"], 5)
                for x in (ae, ak, r["eager"]))
            if b["err"] and not b["tok"]:
                out.append(f"| {r['config']} | error: {b['err'].replace('|', '/')[:120]} | "
                           f"{fmt(ae['tok'])} tok/s | {fmt(ak['tok'])} tok/s | | | | | | | {torch_losses} |")
                continue
            diff = (f"{b['loss_last'] - n['loss_last']:+.2e}"
                    if b["loss_last"] is not None and n["loss_last"] is not None else "n/a")
            mean_txt, worst_txt = "n/a", "n/a"
            lb, lf = b["losses"], n["losses"]
            if lb and lf and len(lb) == len(lf):
                mean_txt = f"{statistics.mean(lb):.4f} / {statistics.mean(lf):.4f}"
                k = max(range(len(lb)), key=lambda i: abs(lb[i] - lf[i]))
                worst_txt = f"{lb[k] - lf[k]:+.2e} (step {k + 1} of {len(lb)})"
            out.append(f"| {r['config']} | {fmt(b['tok'])} | {ratio(b['tok'], ae['tok'])} "
                       f"| {ratio(b['tok'], ak['tok'])} | {ratio(b['tok'], n['tok'])} "
                       f"| {fmt(b['loss_last'], 5)} | {fmt(n['loss_last'], 5)} | {diff} | {mean_txt} "
                       f"| {worst_txt} | {torch_losses} |")
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
        if not sg or not sg[0].get("shapes"):
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
    return out, table


# Sections other scripts (bench/gqa.sh, bench/tokenizers.sh) or people write into the same file:
# kept when the rest is rewritten.
KEPT_SECTIONS = ("## Grouped-query attention", "## Tokenizers", "## Python overhead")


def kept_sections(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        old = f.read()
    out = []
    for heading in KEPT_SECTIONS:
        start = old.find("\n" + heading + "\n")
        if start >= 0:
            end = old.find("\n## ", start + 1)
            out.append(old[start + 1:end if end >= 0 else len(old)].rstrip() + "\n")
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", help="bench/run.sh's results directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--configs", nargs="*", default=["a", "b", "c", "c_matched"])
    ap.add_argument("--store", default=STORE_DEFAULT,
                    help="the per-CPU result files (<cpu key>.json); default bench/results")
    ap.add_argument("--no-store", action="store_true",
                    help="do not write this run's per-CPU file (the report still lists it)")
    ap.add_argument("--per-cpu-only", action="store_true",
                    help="only rewrite the report's \"Results per CPU\" section from the store")
    a = ap.parse_args()

    if a.per_cpu_only:
        section = per_cpu_section([rec for _, rec in read_store(a.store)])
        text = open(a.out).read() if os.path.exists(a.out) else TITLE
        with open(a.out, "w") as f:
            f.write(splice_per_cpu(text, section))
        print(f"wrote the per-CPU section of {a.out}")
        return 0
    if not a.results:
        ap.error("the results directory is required (or --per-cpu-only)")

    runs = load(a.results)
    rounds = max((len(v) for v in runs.values()), default=0)
    rows, details = compute_rows(runs, a.configs)
    cpu, cpu_source = load_cpu(a.results)
    torch_v = next((x.get("torch") for (kind, _), v in sorted(runs.items())
                    if kind in ("eager", "compile", "autocast", "autocast_compile") for x in v
                    if x.get("torch")), None)
    threads = next((x.get("threads") for (kind, _), v in sorted(runs.items())
                    if kind == "normlab" for x in v if x.get("threads")), None)
    stamps = [os.path.getmtime(f) for f in glob.glob(os.path.join(a.results, "*.json"))]
    span = (datetime.datetime.fromtimestamp(min(stamps)), datetime.datetime.fromtimestamp(max(stamps))) \
        if stamps else (datetime.datetime.now(),) * 2
    now = f"{span[0]:%Y-%m-%d %H:%M} to {span[1]:%H:%M}"

    record = {"cpu": cpu, "span": {"start": f"{span[0]:%Y-%m-%d %H:%M}",
                                   "end": f"{span[1]:%Y-%m-%d %H:%M}"},
              "command": a.command, "rounds": rounds, "threads": threads, "torch": torch_v,
              "configs": summarise(rows)}
    if a.no_store:
        stored = read_store(a.store) if os.path.isdir(a.store) else []
        records = [rec for _, rec in stored if not supersedes(record, rec)] + [record]
    else:
        path = write_store(a.store, record)
        print(f"wrote {path}", file=sys.stderr)
        records = [rec for _, rec in read_store(a.store)]

    out = [TITLE, INTRO, per_cpu_section(records)]
    sections, table = run_sections(rows, details, runs, cpu, cpu_source, a.command, now, rounds,
                                   torch_v or "n/a")
    out += sections
    out += kept_sections(a.out)
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            out.append(f.read())
    text = "\n".join(out).rstrip() + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(table)
    print()
    print(per_cpu_table(record))
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
