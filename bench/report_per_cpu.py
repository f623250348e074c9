"""The "Results per CPU" section of docs/benchmarks.md, from the per-CPU store
(report_store.py): one heading and table per stored CPU, the range sentences over all of them,
the MFU definition, and splicing the section into an existing report.
"""
from __future__ import annotations

import cpuinfo  # bench/cpuinfo.py (report.py puts bench/ on the path)
from report_runs import fmt


def cpu_label(info):
    """Short name for range sentences: the generation, else the model name with family/model."""
    if cpuinfo.known_generation(info):
        return info["generation"]
    return f"{info.get('model_name') or 'unknown CPU'} ({info.get('generation')})"


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
