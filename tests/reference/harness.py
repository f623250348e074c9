"""Shared plumbing of the parity tests: find and run normlab's parity_driver, exchange safetensors
files, compare tensors, and collect a per-group summary of the largest relative errors."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import ref_config

REL_TOL = 1e-4
# A tensor's error is measured against max(max|ref|, FLOOR_FRAC * largest |ref| in its group):
# gradients that vanish in exact arithmetic (the key bias under a shift-invariant softmax, the
# k_norm bias) then compare normlab's float32 round-off to the scale of the group, not to zero.
FLOOR_FRAC = 1e-2
DRIVER_TIMEOUT_S = 120


def driver_path():
    """$NORMLAB_BUILD_DIR/tests/parity_driver, or a test failure that says what is missing."""
    build = os.environ.get("NORMLAB_BUILD_DIR")
    if not build:
        pytest.fail("NORMLAB_BUILD_DIR is not set: point it at the CMake build directory, e.g. "
                    "NORMLAB_BUILD_DIR=/work/main/build python -m pytest tests/reference",
                    pytrace=False)
    path = Path(build) / "tests" / "parity_driver"
    if not (path.is_file() and os.access(path, os.X_OK)):
        pytest.fail(f"parity driver not found or not executable at {path} "
                    f"(NORMLAB_BUILD_DIR={build}); build the target 'parity_driver' first",
                    pytrace=False)
    return path


def _f32(tensors):
    return {k: v.detach().to(torch.float32).contiguous() for k, v in tensors.items()}


def run_driver(tmp_dir, cfg, weights, batch, mode="model", adam_steps=0, head_chunk=0,
               extra=()):
    """Write CFG.toml, W.safetensors, BATCH.safetensors into tmp_dir, run the driver, return OUT.
    head_chunk > 0 forces the LM head to run in chunks of that many rows; extra: more driver
    arguments (e.g. ("--admin-profile", "1"))."""
    driver = driver_path()
    tmp_dir = Path(tmp_dir)
    paths = {k: tmp_dir / f for k, f in (("config", "CFG.toml"), ("weights", "W.safetensors"),
                                          ("batch", "BATCH.safetensors"), ("out", "OUT.safetensors"))}
    paths["config"].write_text(ref_config.to_toml(cfg))
    save_file(_f32(weights), str(paths["weights"]))
    save_file({k: v.contiguous() if v.dtype == torch.int64 else v.to(torch.float32).contiguous()
               for k, v in batch.items()}, str(paths["batch"]))
    cmd = [str(driver), "--config", str(paths["config"]), "--weights", str(paths["weights"]),
           "--batch", str(paths["batch"]), "--out", str(paths["out"]), "--mode", mode]
    if adam_steps:
        cmd += ["--adam-steps", str(adam_steps)]
    if head_chunk:
        cmd += ["--head-chunk", str(head_chunk)]
    cmd += [str(a) for a in extra]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=DRIVER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"parity_driver timed out after {DRIVER_TIMEOUT_S} s: {' '.join(cmd)}")
    if proc.returncode != 0:
        pytest.fail(f"parity_driver exited with {proc.returncode}\n  command: {' '.join(cmd)}\n"
                    f"  stdout: {proc.stdout.strip()}\n  stderr: {proc.stderr.strip()}")
    if not paths["out"].is_file():
        pytest.fail(f"parity_driver exited 0 but wrote no {paths['out']}")
    return load_file(str(paths["out"]))


def group_of(name):
    """Summary / floor group of an exchanged tensor name."""
    if name in ("loss", "ce", "z_loss"):
        return "loss"
    return name.split(".", 1)[0]


def compare(got, ref, names):
    """{name: (rel, abs)} for each name, both sides rounded to float32 and diffed in float64."""
    ref32 = {n: ref[n].detach().to(torch.float32).double() for n in names}
    scale = {}
    for n in names:
        g = group_of(n)
        scale[g] = max(scale.get(g, 0.0), float(ref32[n].abs().max()) if ref32[n].numel() else 0.0)
    result = {}
    for n in names:
        a, b = got[n].double(), ref32[n]
        if a.shape != b.shape:
            result[n] = (float("inf"), float("inf"))
            continue
        err = float((a - b).abs().max()) if b.numel() else 0.0
        denom = max(float(b.abs().max()) if b.numel() else 0.0,
                    FLOOR_FRAC * scale[group_of(n)], 1e-30)
        result[n] = (err / denom if torch.isfinite(a).all() else float("inf"), err)
    return result


def check(case_id, got, ref, names, summary, shape_note=""):
    """Compare, record into the summary, and fail listing every tensor over REL_TOL."""
    missing = [n for n in names if n not in got]
    if missing:
        pytest.fail(f"[{case_id}] driver output lacks {missing}")
    bad_shape = [f"{n}: driver {tuple(got[n].shape)} vs oracle {tuple(ref[n].shape)}"
                 for n in names if tuple(got[n].shape) != tuple(ref[n].shape)]
    if bad_shape:
        pytest.fail(f"[{case_id}] shape mismatch:\n  " + "\n  ".join(bad_shape))
    errs = compare(got, ref, names)
    for n, (rel, _) in errs.items():
        summary.record(group_of(n), rel, case_id, n)
    bad = sorted(((rel, n, ab) for n, (rel, ab) in errs.items() if not rel <= REL_TOL), reverse=True)
    if bad:
        lines = [f"{n}: rel {rel:.3e} (max abs diff {ab:.3e})" for rel, n, ab in bad]
        pytest.fail(f"[{case_id}] {len(bad)} tensor(s) over rel tol {REL_TOL:g}{shape_note}:\n  "
                    + "\n  ".join(lines), pytrace=False)
    return errs


class Summary:
    """Largest relative error per group over a test module; printed and appended as JSON lines
    to $NORMLAB_BUILD_DIR/parity_summary.jsonl."""

    def __init__(self, suite):
        self.suite = suite
        self.worst = {}  # group -> (rel, case, tensor)
        self.counts = {}
        self.cases = set()
        self.start = time.time()

    def record(self, group, rel, case, tensor):
        self.cases.add(case)
        self.counts[group] = self.counts.get(group, 0) + 1
        if group not in self.worst or not rel <= self.worst[group][0]:
            self.worst[group] = (rel, case, tensor)

    def emit(self):
        if not self.worst:
            return
        print(f"\n[{self.suite}] largest relative error per group over {len(self.cases)} case(s), "
              f"tol {REL_TOL:g}:")
        rows = []
        for group in sorted(self.worst):
            rel, case, tensor = self.worst[group]
            print(f"  {group:12s} {rel:10.3e}  ({self.counts[group]} tensors; worst: {case} {tensor})")
            rows.append({"suite": self.suite, "group": group, "max_rel": rel, "case": case,
                         "tensor": tensor, "n_tensors": self.counts[group],
                         "n_cases": len(self.cases), "tol": REL_TOL, "time": time.time()})
        build = os.environ.get("NORMLAB_BUILD_DIR")
        if build and Path(build).is_dir():
            with open(Path(build) / "parity_summary.jsonl", "a") as f:
                for row in rows:
                    f.write(json.dumps(row) + "\n")
