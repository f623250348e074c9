"""What CPU a benchmark ran on, from /proc/cpuinfo and lscpu: vendor, model name, family, model,
stepping, CPU count, threads per core, hypervisor, the SIMD/matrix flags that decide normlab's and
PyTorch's kernels, a generation label (Zen 4, Sapphire Rapids, ...) and a stable key for the
per-CPU result files (bench/results/<key>.json, see bench/report.py).

    python3 bench/cpuinfo.py [--out cpu.json]      # prints (or writes) one JSON object

Importable: collect() for this machine, or collect(cpuinfo_text, lscpu_text) on saved outputs;
generation(vendor, family, model) and cpu_key(info) on their own.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys

# The flags that matter for these benchmarks, in /proc/cpuinfo's spelling.
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "avx512_fp16", "amx_tile",
         "amx_bf16", "amx_int8")

# AMD family 25 (Zen 3 and Zen 4 share it): model ranges, inclusive.
_AMD_F25 = [((0x00, 0x0f), "Zen 3"), ((0x20, 0x2f), "Zen 3"), ((0x40, 0x5f), "Zen 3"),
            ((0x10, 0x1f), "Zen 4"), ((0x60, 0x7f), "Zen 4"), ((0xa0, 0xaf), "Zen 4")]

# Intel family 6 server and client parts this project is likely to meet.
_INTEL_F6 = {0x55: "Skylake-SP/Cascade Lake", 0x6a: "Ice Lake-SP", 0x6c: "Ice Lake-SP",
             0x8f: "Sapphire Rapids", 0xcf: "Emerald Rapids", 0xad: "Granite Rapids",
             0xae: "Granite Rapids", 0x8c: "Tiger Lake", 0x8d: "Tiger Lake", 0x97: "Alder Lake",
             0x9a: "Alder Lake", 0xb7: "Raptor Lake", 0xba: "Raptor Lake", 0xbf: "Raptor Lake"}


# The table's parts with AMX.
_INTEL_AMX = ("Sapphire Rapids", "Emerald Rapids", "Granite Rapids")


def generation(vendor, family, model, flags=None):
    """A microarchitecture label, or "family F model M" when the table does not know the part
    (M "n/a" when the model is unknown). An Intel part the table does not know, or one whose model
    number cannot have AMX (a hypervisor may report another part's model), but that reports
    amx_bf16 in flags is "Sapphire Rapids or later (AMX)": AMX-BF16 came with Sapphire Rapids."""
    label = None
    if vendor == "AuthenticAMD":
        if family == 23 and model is not None:
            label = "Zen/Zen+" if model < 0x30 else "Zen 2"
        elif family == 25 and model is not None:
            label = next((g for (lo, hi), g in _AMD_F25 if lo <= model <= hi), None)
        elif family == 26:
            label = "Zen 5"
    elif vendor == "GenuineIntel" and family == 6 and model is not None:
        label = _INTEL_F6.get(model)
    if vendor == "GenuineIntel" and (flags or {}).get("amx_bf16") and label not in _INTEL_AMX:
        label = "Sapphire Rapids or later (AMX)"
    if label:
        return label
    return f"family {family if family is not None else 'n/a'} model {model if model is not None else 'n/a'}"


def known_generation(info):
    """True when the generation is a name from the table, not the "family F model M" fallback."""
    g = info.get("generation") or ""
    return bool(g) and not g.startswith("family ")


def cpu_key(info):
    """A stable file-name key, e.g. amd-f25-m17-zen4 (family and model in decimal, as lscpu
    prints them; the model part left out when unknown, the generation part when not in the
    table)."""
    vendor = {"AuthenticAMD": "amd", "GenuineIntel": "intel"}.get(info.get("vendor"))
    if vendor is None:
        vendor = re.sub(r"[^a-z0-9]+", "-", (info.get("vendor") or "unknown").lower()).strip("-")
    parts = [vendor or "unknown"]
    if info.get("family") is not None:
        parts.append(f"f{info['family']}")
    if info.get("model") is not None:
        parts.append(f"m{info['model']}")
    if known_generation(info):
        g = info["generation"].lower().replace("+", "plus")
        g = re.sub(r" (\d)", r"\1", g)  # "zen 4" -> "zen4"
        parts.append(re.sub(r"[^a-z0-9]+", "-", g).strip("-"))
    return "-".join(parts)


def _fields(text):
    """key: value lines into a dict (first occurrence wins: /proc/cpuinfo's first processor)."""
    out = {}
    for line in (text or "").splitlines():
        if ":" not in line:
            continue
        k, v = line.split(":", 1)
        out.setdefault(k.strip(), v.strip())
    return out


def _int(s, base=10):
    try:
        return int(str(s).strip(), base)
    except (TypeError, ValueError):
        return None


def _read_proc():
    try:
        with open("/proc/cpuinfo") as f:
            return f.read()
    except OSError:
        return None


def _run_lscpu():
    try:
        return subprocess.run(["lscpu"], capture_output=True, text=True, check=True, timeout=30,
                              env=dict(os.environ, LC_ALL="C")).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def collect(cpuinfo_text=None, lscpu_text=None, read_machine=True):
    """The CPU description as a dict. Without texts (and read_machine), reads this machine."""
    if read_machine and cpuinfo_text is None:
        cpuinfo_text = _read_proc()
    if read_machine and lscpu_text is None:
        lscpu_text = _run_lscpu()
    p, ls = _fields(cpuinfo_text), _fields(lscpu_text)
    nproc = len(re.findall(r"^processor\s*:", cpuinfo_text or "", flags=re.M)) or None

    vendor = p.get("vendor_id") or ls.get("Vendor ID")
    family = _int(p.get("cpu family")) if "cpu family" in p else _int(ls.get("CPU family"))
    model = _int(p.get("model")) if "model" in p else _int(ls.get("Model"))
    stepping = _int(p.get("stepping")) if "stepping" in p else _int(ls.get("Stepping"))
    cpus = _int(ls.get("CPU(s)")) or nproc or os.cpu_count()
    tpc = _int(ls.get("Thread(s) per core"))
    if tpc is None and _int(p.get("siblings")) and _int(p.get("cpu cores")):
        tpc = _int(p["siblings"]) // _int(p["cpu cores"])
    flag_text = p.get("flags") or ls.get("Flags")
    have = set(flag_text.split()) if flag_text else None
    hypervisor = ls.get("Hypervisor vendor") or None
    vm = None
    if have is not None or hypervisor:
        vm = bool(hypervisor) or ("hypervisor" in (have or set()))
    info = {
        "vendor": vendor,
        "model_name": p.get("model name") or ls.get("Model name"),
        "family": family,
        "model": model,
        "stepping": stepping,
        "cpus": cpus,
        "threads_per_core": tpc,
        "hypervisor": hypervisor,
        "vm": vm,
        # None: not known (no flag list to read)
        "flags": {f: (None if have is None else f in have) for f in FLAGS},
    }
    info["generation"] = generation(vendor, family, model, info.get("flags"))
    info["key"] = cpu_key(info)
    return info


def describe(info, with_flags=True):
    """One line for a heading: model name, generation, family/model, flags it has, VM or not."""
    fam = info.get("family")
    mod = info.get("model")
    fm = (f"family {fam if fam is not None else 'n/a'}, model "
          + (f"{mod} (0x{mod:x})" if mod is not None else "n/a"))
    parts = [f"{info.get('model_name') or 'unknown CPU'}"]
    gen = info.get("generation")
    parts.append(f"{gen}, {fm}" if known_generation(info) else fm)
    if with_flags:
        flags = info.get("flags") or {}
        has = [f for f in FLAGS if flags.get(f)]
        unknown = [f for f in FLAGS if flags.get(f) is None]
        txt = " ".join(has) if has else "none of " + " ".join(FLAGS)
        if unknown and has:
            txt += " (others not recorded)"
        elif unknown:
            txt = "flags not recorded"
        parts.append(txt)
    vm = info.get("vm")
    if vm is None:
        parts.append("VM: not recorded")
    elif vm:
        parts.append("VM" + (f" ({info['hypervisor']})" if info.get("hypervisor") else ""))
    else:
        parts.append("bare metal")
    return "; ".join(parts)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the JSON there instead of printing it")
    a = ap.parse_args(argv)
    text = json.dumps(collect(), indent=1)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
