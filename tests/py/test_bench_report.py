"""bench/report.py and bench/cpuinfo.py on synthetic results (nothing here trains or times
anything): the per-CPU store and its tables hold the medians, ratios and per-round MFUs computed
by hand below, errors show, a second CPU gets its own table and the range sentences cover both,
and a rerun on the same CPU replaces its file. Plus cpuinfo's generation table and key."""
import datetime
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
REPORT = ROOT / "bench" / "report.py"
sys.path.insert(0, str(ROOT / "bench"))
import cpuinfo  # noqa: E402

ZEN4_CPU = {"vendor": "AuthenticAMD", "model_name": "AMD EPYC 9654", "family": 25, "model": 17,
            "stepping": 1, "cpus": 2, "threads_per_core": 1, "hypervisor": "KVM", "vm": True,
            "flags": {f: f in ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni")
                      for f in cpuinfo.FLAGS},
            "generation": "Zen 4", "key": "amd-f25-m17-zen4"}

# Per config and round: tok/s of every kind, normlab's GFLOP/s (float32, bf16) and the sgemm
# runs' rates. None: that run failed.
NUMBERS = {
    "a": {
        "normlab": (5000, 5400), "normlab_bf16": (8000, 9000), "eager": (2500, 2600),
        "compile": (2700, 2900), "autocast": (3000, 3200), "autocast_compile": (3500, 3900),
        "gflops": (400, 300), "gflops_bf16": (600, 720),
        # round 1: best of normlab gemm 480 and SkylakeX 500 -> 500; round 2: 600 and 450 -> 600
        "normlab_gemm": (480, 600), "skx": (500, 450), "bf16_gemm": (1000, 800),
    },
    "b": {
        "normlab": (400, 440), "normlab_bf16": (600, 640), "eager": (170, 190),
        "compile": (185, 195), "autocast": (200, 220), "autocast_compile": (250, None),
        "gflops": (300, 320), "gflops_bf16": (400, 420),
        "normlab_gemm": (470, 450), "skx": (460, 500), "bf16_gemm": (800, 700),
    },
}
ERROR = "exit status 1: inductor crashed in round 2"

# By hand: medians over the two rounds, ratios of the medians, MFU per round then the median.
EXPECTED = {
    "a": {"tok": {"normlab_fp32": 5200, "eager": 2550, "compile": 2800, "normlab_bf16": 8500,
                  "autocast_eager": 3100, "autocast_compile": 3700},
          "ratios": {"fp32_vs_eager": 5200 / 2550, "fp32_vs_compile": 5200 / 2800,
                     "bf16_vs_autocast_eager": 8500 / 3100, "bf16_vs_autocast_compile": 8500 / 3700},
          "mfu_fp32_rounds": [400 / 500, 300 / 600], "mfu_fp32": 0.65,  # not 350 / 550
          "mfu_bf16_rounds": [600 / 1000, 720 / 800], "mfu_bf16": 0.75,  # not 660 / 900
          "row": "| a | 5,200 | 2,550 | 2,800 | 2.04x | 1.86x | 65.0% | 8,500 | 3,100 | 3,700 | "
                 "2.74x | 2.30x | 75.0% |"},
    "b": {"tok": {"normlab_fp32": 420, "eager": 180, "compile": 190, "normlab_bf16": 620,
                  "autocast_eager": 210, "autocast_compile": 250},  # the failed round left out
          "ratios": {"fp32_vs_eager": 420 / 180, "fp32_vs_compile": 420 / 190,
                     "bf16_vs_autocast_eager": 620 / 210, "bf16_vs_autocast_compile": 620 / 250},
          "mfu_fp32_rounds": [300 / 470, 320 / 500], "mfu_fp32": (300 / 470 + 320 / 500) / 2,
          "mfu_bf16_rounds": [400 / 800, 420 / 700], "mfu_bf16": 0.55,
          "row": "| b | 420 | 180 | 190 | 2.33x | 2.21x | 63.9% | 620 | 210 | 250 | 2.95x | "
                 "2.48x | 55.0% |"},
}


def write_results(d, numbers=NUMBERS, cpu=ZEN4_CPU, start=datetime.datetime(2026, 12, 2, 10, 0)):
    d.mkdir(parents=True, exist_ok=True)
    files = []

    def put(name, obj):
        p = d / f"{name}.json"
        p.write_text(json.dumps(obj) + "\n")
        files.append(p)

    if cpu is not None:
        put("cpu", cpu)
    for cfg, n in numbers.items():
        for i, r in enumerate((1, 2)):
            put(f"sgemm_{cfg}_r{r}", {
                "config": cfg, "threads": 2, "blas": "OpenBLAS core Haswell", "blas_gflops": 250.0,
                "normlab_gemm_gflops": n["normlab_gemm"][i], "normlab_bf16_gflops": n["bf16_gemm"][i],
                "shapes": [{"what": "wqkv fwd", "ta": False, "tb": True, "M": 64, "N": 96, "K": 32,
                            "count": 2, "blas_gflops": 250.0, "normlab_gflops": 480.0,
                            "bf16_gflops": 900.0}]})
            put(f"sgemm_skx_{cfg}_r{r}", {"config": cfg, "blas": "OpenBLAS core SkylakeX",
                                          "blas_gflops": n["skx"][i], "normlab_gemm_gflops": 100.0})
            for kind in ("normlab", "normlab_bf16"):
                tok = n[kind][i]
                put(f"{kind}_{cfg}_r{r}", {
                    "impl": "normlab", "config": cfg, "threads": 2, "description": f"model {cfg}",
                    "precision": "bf16" if kind == "normlab_bf16" else "float32",
                    "tokens_per_s": tok, "step_ms_median": 1000.0, "flops_per_token": 7e7,
                    "gflops": n["gflops_bf16" if kind == "normlab_bf16" else "gflops"][i],
                    "peak_rss_mb": 500.0, "baseline_rss_mb": 9.0, "loss_first": 5.6,
                    "loss_last": 5.5 if kind == "normlab" else 5.501,
                    "losses": [5.6, 5.5] if kind == "normlab" else [5.6, 5.501]})
            for kind in ("eager", "compile", "autocast", "autocast_compile"):
                tok = n[kind][i]
                if tok is None:
                    put(f"{kind}_{cfg}_r{r}", {"error": ERROR})
                    continue
                put(f"{kind}_{cfg}_r{r}", {
                    "impl": kind, "config": cfg, "torch": "2.13.0+cpu", "threads": 2,
                    "tokens_per_s": tok, "step_ms_median": 2000.0, "first_step_ms": 3000.0,
                    "peak_rss_mb": 900.0, "imported_rss_mb": 219.0, "loss_last": 5.45,
                    "losses": [5.6, 5.45]})
    for k, p in enumerate(files):  # a run of 20 minutes, in the order written
        t = (start + datetime.timedelta(seconds=20 * 60 * k / max(1, len(files) - 1))).timestamp()
        os.utime(p, (t, t))
    return d


def report(results, out, store=None, *extra):
    args = [sys.executable, str(REPORT), str(results), "--out", str(out), "--configs", "a", "b",
            "--command", 'ROUNDS="2" bench/run.sh']
    args += ["--store", str(store)] if store is not None else []
    r = subprocess.run(args + list(extra), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return out.read_text()


def per_cpu(text):
    start = text.index("## Results per CPU\n")
    return text[start:text.index("\n## ", start + 1)]


def cpu_tables(section):
    """{heading: [table rows]} in order."""
    out = {}
    for block in section.split("\n### ")[1:]:
        heading, body = block.split("\n", 1)
        out[heading] = [ln for ln in body.splitlines() if re.match(r"\| (a|b|c|c_matched) \|", ln)]
    return out


ZEN5_RECORD = {
    "cpu": {"vendor": "AuthenticAMD", "model_name": "AMD EPYC 9B45", "family": 26, "model": 2,
            "stepping": 1, "cpus": 4, "threads_per_core": 2, "hypervisor": None, "vm": False,
            "flags": {f: True for f in cpuinfo.FLAGS[:5]} | {f: False for f in cpuinfo.FLAGS[5:]},
            "generation": "Zen 5", "key": "amd-f26-m2-zen5"},
    "span": {"start": "2026-11-29 16:55", "end": "2026-11-29 17:17"},
    "command": "bench/run.sh", "rounds": 3, "threads": 4, "torch": "2.13.0+cpu",
    "configs": {"a": {
        "tok_s": {"normlab_fp32": 9000.0, "normlab_bf16": 12000.0, "eager": 3000.0, "compile": 3600.0,
                  "autocast_eager": 2000.0, "autocast_compile": 6000.0},
        "ratios": {"fp32_vs_eager": 3.0, "fp32_vs_compile": 2.5, "bf16_vs_autocast_eager": 6.0,
                   "bf16_vs_autocast_compile": 2.0, "bf16_vs_fp32": 1.3333},
        "mfu_fp32": 0.9, "mfu_fp32_rounds": [0.9, 0.9, 0.9], "mfu_bf16": 0.42,
        "mfu_bf16_rounds": [0.42, 0.42, 0.42], "gflops": {"fp32": 600.0, "bf16": 800.0},
        "sgemm_best_gflops": 666.7, "gemm_bf16_gflops": 1900.0, "errors": {}}},
}


@pytest.fixture()
def results(tmp_path):
    return write_results(tmp_path / "results")


def test_store_and_tables(results, tmp_path):
    store, out = tmp_path / "store", tmp_path / "benchmarks.md"
    out.write_text("# old\n\n## Grouped-query attention\n\nkept GQA text\n\n## Definitions\n\nold\n")
    text = report(results, out, store)

    # the store: one file named by the CPU key, with the medians, ratios and per-round MFUs
    assert sorted(p.name for p in store.iterdir()) == ["amd-f25-m17-zen4.json"]
    rec = json.loads((store / "amd-f25-m17-zen4.json").read_text())
    assert rec["cpu"]["generation"] == "Zen 4" and rec["cpu"]["model_name"] == "AMD EPYC 9654"
    assert rec["rounds"] == 2 and rec["threads"] == 2 and rec["torch"] == "2.13.0+cpu"
    assert rec["command"] == 'ROUNDS="2" bench/run.sh'
    assert rec["span"] == {"start": "2026-12-02 10:00", "end": "2026-12-02 10:20"}
    for cfg, want in EXPECTED.items():
        got = rec["configs"][cfg]
        assert got["tok_s"] == pytest.approx(want["tok"])
        for k, v in want["ratios"].items():
            assert got["ratios"][k] == pytest.approx(v, abs=1e-4), (cfg, k)
        for k in ("mfu_fp32", "mfu_bf16"):
            assert got[k] == pytest.approx(want[k], abs=1e-4), (cfg, k)
            assert got[k + "_rounds"] == pytest.approx(want[k + "_rounds"], abs=1e-4), (cfg, k)
    assert rec["configs"]["a"]["sgemm_best_gflops"] == pytest.approx(550.0)  # median of 500, 600
    assert rec["configs"]["a"]["gemm_bf16_gflops"] == pytest.approx(900.0)
    assert rec["configs"]["b"]["errors"] == {}  # one round of b's autocast compile still ran

    # the report opens with the per-CPU section: one heading and table for this CPU
    assert text.startswith("# Benchmarks: training throughput, normlab vs PyTorch\n")
    assert text.index("## Results per CPU") < text.index("## Latest run") < text.index("## Results\n")
    tables = cpu_tables(per_cpu(text))
    assert len(tables) == 1
    (heading, rows), = tables.items()
    assert heading.startswith("2026-12-02: AMD EPYC 9654; Zen 4, family 25, model 17 (0x11)")
    assert "avx512_bf16" in heading and "amx_tile" not in heading and "VM (KVM)" in heading
    assert rows == [EXPECTED["a"]["row"], EXPECTED["b"]["row"]]
    assert "normlab float32 vs PyTorch eager: 2.04x (a, Zen 4) to 2.33x (b, Zen 4) over 1 CPU (Zen 4)" in text

    # the run's own sections: both MFUs with their per-round values, the autocast peers, the error
    assert "a: 80%, 50%; b: 64%, 64% per round" in text
    assert "a: 60%, 90%; b: 50%, 60% per round" in text
    assert ("| a: MFU >= 90% of the sgemm rate of the same run (float32) | 65.0% (per round: 80%, "
            "50%) | **not met** |") in text
    assert ("| b: MFU >= 85% of the sgemm rate of the same run (float32) | 63.9% (per round: 64%, "
            "64%) | **not met** |") in text
    assert "| a: normlab bf16 ahead of torch autocast bf16 eager | 2.74x | met |" in text
    assert "| b: normlab bf16 ahead of torch autocast bf16 compile | 2.48x | met |" in text
    detail = [ln for ln in text.splitlines() if ln.startswith("| b | torch autocast bf16 compile |")]
    assert len(detail) == 1 and ERROR in detail[0] and "| 250 |" in detail[0]
    assert "| a | torch autocast bf16 eager | 3,000, 3,200 | 1.22x |" in text
    bf16_row = next(ln for ln in text.splitlines() if ln.startswith("| a | 8,500 | 2.74x | 2.30x | 1.63x |"))
    assert bf16_row.endswith("| 5.45000 / 5.45000 / 5.45000 |")
    assert "kept GQA text" in text  # other scripts' sections survive


def test_second_cpu_and_rerun(results, tmp_path):
    store, out = tmp_path / "store", tmp_path / "benchmarks.md"
    store.mkdir()
    (store / "amd-f26-m2-zen5.json").write_text(json.dumps(ZEN5_RECORD))
    text = report(results, out, store)
    tables = cpu_tables(per_cpu(text))
    headings = list(tables)
    assert len(headings) == 2
    assert "Zen 4" in headings[0] and "Zen 5" in headings[1]  # newest first
    assert "bare metal" in headings[1]
    assert tables[headings[1]] == ["| a | 9,000 | 3,000 | 3,600 | 3.00x | 2.50x | 90.0% | 12,000 | "
                                   "2,000 | 6,000 | 6.00x | 2.00x | 42.0% |"]
    sec = per_cpu(text)
    assert ("normlab float32 vs PyTorch eager: 2.04x (a, Zen 4) to 3.00x (a, Zen 5) over 2 CPUs "
            "(Zen 4, Zen 5).") in sec
    assert ("normlab bf16 vs PyTorch autocast bf16 compile: 2.00x (a, Zen 5) to 2.48x (b, Zen 4) "
            "over 2 CPUs (Zen 4, Zen 5).") in sec
    assert "MFU float32: 63.9% (b, Zen 4) to 90.0% (a, Zen 5) over 2 CPUs (Zen 4, Zen 5)." in sec
    assert "MFU bf16: 42.0% (a, Zen 5) to 75.0% (a, Zen 4) over 2 CPUs (Zen 4, Zen 5)." in sec

    # a rerun on the same CPU replaces its file, and leaves the other CPU's alone
    numbers = json.loads(json.dumps(NUMBERS))
    numbers["a"]["normlab"] = [6000, 6400]
    results2 = write_results(tmp_path / "results2", numbers,
                             start=datetime.datetime(2026, 12, 3, 9, 0))
    text = report(results2, out, store)
    assert sorted(p.name for p in store.iterdir()) == ["amd-f25-m17-zen4.json", "amd-f26-m2-zen5.json"]
    rec = json.loads((store / "amd-f25-m17-zen4.json").read_text())
    assert rec["configs"]["a"]["tok_s"]["normlab_fp32"] == pytest.approx(6200)
    assert rec["span"]["start"] == "2026-12-03 09:00"
    assert json.loads((store / "amd-f26-m2-zen5.json").read_text()) == ZEN5_RECORD
    tables = cpu_tables(per_cpu(text))
    assert len(tables) == 2
    assert next(iter(tables.values()))[0].startswith("| a | 6,200 | 2,550 | 2,800 | 2.43x |")


def test_transcribed_record_is_superseded(results, tmp_path):
    """A stored record whose CPU model was not known (transcribed) gives way to a run on a CPU of
    the same vendor, family and model name; --no-store writes nothing but still lists the run."""
    store, out = tmp_path / "store", tmp_path / "benchmarks.md"
    store.mkdir()
    old = json.loads(json.dumps(ZEN5_RECORD))
    old["cpu"].update(family=25, model=None, model_name="AMD EPYC 9654", generation="Zen 3",
                      key="amd-f25")  # not a real table entry: just an unknown-model record
    old["source"] = "transcribed"
    (store / "amd-f25.json").write_text(json.dumps(old))
    text = report(results, out, store, "--no-store")
    assert sorted(p.name for p in store.iterdir()) == ["amd-f25.json"]
    assert len(cpu_tables(per_cpu(text))) == 1
    report(results, out, store)
    assert sorted(p.name for p in store.iterdir()) == ["amd-f25-m17-zen4.json"]


def test_without_cpu_json(tmp_path):
    """Older results have no cpu.json: the report reads the machine it runs on."""
    results = write_results(tmp_path / "results", cpu=None)
    store = tmp_path / "store"
    text = report(results, tmp_path / "benchmarks.md", store, "--no-store")
    assert not store.exists()
    assert "read when the report was made" in text
    assert len(cpu_tables(per_cpu(text))) == 1


def test_seeded_store_renders(tmp_path):
    """The committed per-CPU files (bench/results) load and render, notes included."""
    stored = sorted((ROOT / "bench" / "results").glob("*.json"))
    assert stored, "bench/results holds no per-CPU file"
    out = tmp_path / "benchmarks.md"
    out.write_text("# Benchmarks\n\n## Definitions\n\nx\n")
    r = subprocess.run([sys.executable, str(REPORT), "--per-cpu-only", "--out", str(out),
                        "--store", str(ROOT / "bench" / "results")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    text = out.read_text()
    assert len(cpu_tables(per_cpu(text))) == len(stored)
    assert text.rstrip().endswith("## Definitions\n\nx")
    for p in stored:
        rec = json.loads(p.read_text())
        assert p.stem == rec["cpu"]["key"]
        if rec.get("source"):
            assert rec["source"] in text


@pytest.mark.parametrize("vendor,family,model,label", [
    ("AuthenticAMD", 25, 0x11, "Zen 4"),
    ("AuthenticAMD", 25, 0x61, "Zen 4"),
    ("AuthenticAMD", 25, 0x01, "Zen 3"),
    ("AuthenticAMD", 26, 0x02, "Zen 5"),
    ("AuthenticAMD", 26, None, "Zen 5"),
    ("AuthenticAMD", 23, 0x31, "Zen 2"),
    ("AuthenticAMD", 23, 0x01, "Zen/Zen+"),
    ("GenuineIntel", 6, 0x8F, "Sapphire Rapids"),
    ("GenuineIntel", 6, 0x55, "Skylake-SP/Cascade Lake"),
    ("GenuineIntel", 6, 0x01, "family 6 model 1"),
    ("AuthenticAMD", 25, 0x30, "family 25 model 48"),
    ("HygonGenuine", 24, 0, "family 24 model 0"),
])
def test_generation_table(vendor, family, model, label):
    assert cpuinfo.generation(vendor, family, model) == label


# A hypervisor may report another part's model number (here 167, a Rocket Lake client, which has
# no AMX): the AMX flag names the generation; a known AMX part keeps its own name.
@pytest.mark.parametrize("model,flags,label", [
    (167, {"amx_bf16": True}, "Sapphire Rapids or later (AMX)"),
    (0x01, {"amx_bf16": True}, "Sapphire Rapids or later (AMX)"),
    (0xCF, {"amx_bf16": True}, "Emerald Rapids"),
    (0x8F, {"amx_bf16": True}, "Sapphire Rapids"),
    (167, {"amx_bf16": False}, "family 6 model 167"),
])
def test_generation_from_amx_flag(model, flags, label):
    assert cpuinfo.generation("GenuineIntel", 6, model, flags) == label


PROC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9654 96-Core Processor
stepping\t: 1
siblings\t: 4
cpu cores\t: 2
flags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 avx512_vnni hypervisor

processor\t: 1
vendor_id\t: AuthenticAMD
"""
LSCPU = "CPU(s):  4\nThread(s) per core:  2\nHypervisor vendor:  KVM\n"


def test_collect_and_key():
    info = cpuinfo.collect(PROC, LSCPU, read_machine=False)
    assert info["key"] == "amd-f25-m17-zen4" and info["generation"] == "Zen 4"
    assert (info["family"], info["model"], info["stepping"]) == (25, 17, 1)
    assert info["cpus"] == 4 and info["threads_per_core"] == 2
    assert info["vm"] is True and info["hypervisor"] == "KVM"
    assert info["flags"]["avx512_bf16"] is True and info["flags"]["amx_tile"] is False
    bare = cpuinfo.collect(PROC.replace(" hypervisor", ""), "", read_machine=False)
    assert bare["vm"] is False and bare["cpus"] == 2 and bare["threads_per_core"] == 2
    intel = {"vendor": "GenuineIntel", "family": 6, "model": 0x8F}
    intel["generation"] = cpuinfo.generation(**intel)
    assert cpuinfo.cpu_key(intel) == "intel-f6-m143-sapphire-rapids"
    unknown = {"vendor": "GenuineIntel", "family": 6, "model": 1}
    unknown["generation"] = cpuinfo.generation(**unknown)
    assert cpuinfo.cpu_key(unknown) == "intel-f6-m1"
    # runnable: prints one JSON object for this machine
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "cpuinfo.py")], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["key"]


def test_kernel_note():
    import report_per_cpu
    assert report_per_cpu.kernel_note("amx") == "amx (AMX tiles, tdpbf16ps)"
    assert report_per_cpu.kernel_note("avx512bf16") == "avx512bf16 (vdpbf16ps)"
    fallback = report_per_cpu.kernel_note("float32 kernel on bf16-rounded copies")
    assert "no AVX512-BF16" in fallback and "picks float32" in fallback
