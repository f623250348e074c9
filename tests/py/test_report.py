"""`normlab report` end to end on small synthetic run, sweep and gradflow directories (the JSON
files are written here directly, so nothing depends on training): the page is self-contained,
the figures exist as SVG files, and headless Chromium loads it without errors and finds charts
that actually drew something."""
import json
import math
import os
import pathlib
import re
import shutil
import subprocess

import pytest
from normlab_cli import BUILD, normlab as run_normlab

L = 4  # layers of the synthetic runs


def normlab(*args, check=None):
    return run_normlab(*args, check=check, timeout=60)


def write_run(d, placement, lr, steps=100, diag=True, diverge_at=None, scale=1.0, end_event=False):
    """A run directory: config.toml and metrics.jsonl as `normlab train` writes them (with
    `end_event`, ending with the end event line; a diverged run then stops at diverge_at)."""
    d.mkdir(parents=True)
    (d / "config.toml").write_text(
        f'[model]\nplacement = "{placement}"\nn_layer = {L}\nd_model = 32\nn_head = 2\n'
        f"[optim]\nlr = {lr}\n[train]\nsteps = {steps}\n[diag]\ninterval = {10 if diag else 0}\n")
    lines = []
    for step in [1] + list(range(5, steps + 1, 5)):
        t = step / steps
        offset = {"post": 0.15, "pre": 0.0, "peri": -0.1}[placement]
        loss = 2.0 + offset + 3.5 * scale * math.exp(-4 * t) + 0.05 * math.sin(step)
        if diverge_at is not None and step >= diverge_at:
            loss = None if step > diverge_at else 40.0
        rec = {"step": step, "tokens": step * 4096, "loss": loss, "ce": loss, "z_loss": 0.0, "lr": lr,
               "grad_norm": None if loss is None else (1.5 + offset) * math.exp(-t) + 0.2, "tokens_per_s": 1e5,
               "log_z_mean": None if loss is None else 5.5 - (3 + offset * 5) * t}
        if step % 25 == 0:
            rec["val_loss"] = None if loss is None else loss + 0.1
        if diag and (step == 1 or step % 10 == 0):
            grow = {"post": 1.5, "pre": 0.7, "peri": 1.0}[placement]
            rec["grad_norm_block"] = [0.1 * grow ** l for l in range(L)]
            rec["grad_norm_attn"] = [0.06 * grow ** l for l in range(L)]
            rec["grad_norm_mlp"] = [0.08 * grow ** l for l in range(L)]
            rec["grad_norm_group"] = {"attn": 0.2, "mlp": 0.3}
            rec["resid_rms"] = [1.0 + (0.5 if placement == "pre" else 0.05) * k for k in range(2 * L + 1)]
            rec["resid_max"] = [5.0 + k for k in range(2 * L + 1)]
            rec["attn_max_logit"] = [3 + {"post": 20, "pre": 3, "peri": 1}[placement] * t * (l + 1) / L
                                     for l in range(L)]
            rec["attn_entropy"] = [2.0] * L
            rec["log_z_std"], rec["log_z_max"], rec["max_logit"] = 0.5, 7.0, 9.0
            rec["update_ratio"] = {"attn": 1e-3, "mlp": 2e-3}
            if loss is None:
                rec["attn_max_logit"] = [None] * L
        lines.append(json.dumps(rec))
        if end_event and diverge_at is not None and step >= diverge_at:
            break
    if end_event:
        diverged = diverge_at is not None
        lines.append(json.dumps({
            "event": "end", "step": diverge_at if diverged else steps, "reason": "diverged" if diverged else "done",
            "detail": f"diverged: smoothed loss above the initial loss since step {diverge_at - 20}" if diverged else "",
            "train_loss": 2.2, "train_loss_steps": 20, "val_loss": None if diverged else 2.3, "tokens_per_s": 1e5,
            "wall_s": 3.0}))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")


def write_sweep(d):
    d.mkdir(parents=True)
    lrs = [3e-4, 1e-3, 3e-3, 1e-2]
    runs, sens = [], []
    for placement in ["post", "peri"]:
        finals = []
        for i, lr in enumerate(lrs):
            name = f"{placement}_lr{lr:g}"
            status = "done"
            if placement == "post" and lr == 1e-2:
                status = "failed"  # no run directory at all
                finals.append(None)
            else:
                diverge = placement == "post" and lr == 3e-3
                write_run(d / name, placement, lr, steps=40, diag=False, diverge_at=30 if diverge else None,
                          scale=1 + abs(i - 1.5) * 0.2)
                status = "diverged" if diverge else "done"
                finals.append(None if diverge else 2.1 + 0.1 * abs(i - 1.5) + (0.06 if placement == "post" else 0))
            runs.append({"name": name, "dir": name, "status": status,
                         "overrides": {"optim.lr": lr, "model.placement": placement},
                         "initial_loss": 5.5, "final_loss": finals[-1], "final_val_loss": finals[-1],
                         "max_attn_logit": 10.0})
        sens.append({"variant": {"model.placement": placement}, "label": f"placement={placement}",
                     "sensitivity": 0.42 if placement == "post" else 0.08,
                     "best_loss": min(f for f in finals if f is not None), "lrs": lrs, "final_losses": finals})
    (d / "sweep.json").write_text(json.dumps({
        "grid": {"optim.lr": lrs, "model.placement": ["post", "peri"]}, "runs": runs,
        "sensitivity": sens, "lr_key": "optim.lr"}))


def write_gradflow(d):
    d.mkdir(parents=True)
    results = []
    for placement, grow in [("post", 1.6), ("pre", 0.8), ("peri", 1.0)]:
        n = 6
        results.append({"placement": placement, "n_layer": n, "init": "xavier", "label": f"{placement} L={n} xavier",
                         "grad_norm_layer": [0.01 * grow ** l for l in range(n)],
                         "grad_norm_attn": [0.006 * grow ** l for l in range(n)],
                         "grad_norm_mlp": [0.008 * grow ** l for l in range(n)],
                         "hidden_rms": [1.0 + (0.6 if placement == "pre" else 0.0) * k for k in range(n + 1)]})
    (d / "gradflow.json").write_text(json.dumps({"settings": {"d_model": 64, "batch": 8}, "results": results}))


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    runs = []
    for placement, lr, div in [("post", 3e-3, 80), ("pre", 3e-3, None), ("peri", 3e-3, None)]:
        write_run(root / "runs" / placement, placement, lr, diverge_at=div, end_event=True)
        runs.append(root / "runs" / placement)
    write_sweep(root / "sweep")
    write_gradflow(root / "gradflow")
    out = root / "out" / "report.html"
    p = normlab("report", *runs, root / "sweep", root / "gradflow", "--out", out, "--title", "Norms & <friends>",
                check=0)
    return root, out, p.stdout


def test_page_is_self_contained(report):
    _, out, _ = report
    html = out.read_text()
    assert not re.search(r"https?:", html, re.I), "the page must not reference the network"
    assert "<svg" in html and "<script src" not in html and "<link" not in html and "@import" not in html
    assert "Norms &amp; &lt;friends&gt;" in html  # the title is escaped
    # Series are labelled by what differs among the runs of each chart, short.
    assert "peri, lr 3e-3" in html and "placement=" not in html
    # The diverged run is marked where it stopped, with the reason as the tooltip.
    assert "diverged at step 80: diverged: smoothed loss above the initial loss since step 60</title>" in html
    # Smoothed training curves over faint raw ones; minor ticks on log axes; which loss is which.
    assert "EMA, weight 0.9 per step" in html and 'stroke-opacity="0.25"' in html and 'class="grid minor"' in html
    assert "final val loss" in html and "train loss" in html
    # The sweep's sensitivity is in the legend and its diverged run is marked.
    assert "sensitivity 0.42" in html and 'class="mark"' in html
    assert "<details" in html and 'class="diff"' in html


def test_figures_written_as_svg_files(report):
    _, out, stdout = report
    figs = out.parent / "report_figures"
    names = {p.stem for p in figs.glob("*.svg")}
    for name in ["loss", "lr_sensitivity", "grad_norm_layers_gradflow", "grad_norm_layers_runs",
                 "resid_rms_gradflow", "resid_rms_runs", "attn_max_logit", "log_z"]:
        assert name in names, f"{name}.svg missing; have {sorted(names)}\n{stdout}"
        text = (figs / f"{name}.svg").read_text()
        assert text.startswith("<?xml") and 'xmlns="http://www.w3.org/2000/svg"' in text
        assert re.search(r'<path d="M[^"]* L', text), f"{name}.svg draws no line"


def test_missing_figures_are_listed(tmp_path):
    write_run(tmp_path / "plain", "pre", 1e-3, diag=False)
    out = tmp_path / "r.html"
    p = normlab("report", tmp_path / "plain", "--out", out, check=0)
    html = out.read_text()
    assert "not shown" in p.stdout and 'id="not-shown"' in html
    assert "diag.interval" in html  # says why the diagnostics figures are missing
    assert (tmp_path / "r_figures" / "loss.svg").exists()
    assert not (tmp_path / "r_figures" / "attn_max_logit.svg").exists()


def test_bad_inputs(tmp_path):
    p = normlab("report", tmp_path, "--out", tmp_path / "r.html")
    assert p.returncode == 3 and "sweep.json" in p.stderr
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "sweep.json").write_text("{not json")
    p = normlab("report", tmp_path / "s", "--out", tmp_path / "r.html")
    assert p.returncode == 3 and "sweep.json" in p.stderr
    assert normlab("report", "--out", tmp_path / "r.html").returncode == 2  # RUN_DIR is required


def chromium():
    for name in ["chromium", "chromium-browser", "google-chrome"]:
        if shutil.which(name):
            return shutil.which(name)
    pytest.fail("chromium is not installed (scripts/install-deps.sh installs it)")


def test_renders_in_headless_chromium(report, tmp_path):
    _, out, _ = report
    args = [chromium(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
            "--disable-extensions", "--enable-logging=stderr", "--v=0", f"--user-data-dir={tmp_path / 'profile'}"]
    p = subprocess.run([*args, "--dump-dom", out.as_uri()], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr[-2000:]
    body = re.search(r"<body([^>]*)>", p.stdout)
    assert body, p.stdout[:2000]
    charts = re.search(r'data-charts="(\d+)"', body.group(1))
    errors = re.search(r'data-errors="([^"]*)"', body.group(1))
    assert charts and errors is not None, body.group(0)
    assert int(charts.group(1)) >= 8, body.group(0)
    # In the browser: no chart's legend repeats a label, and the diverged runs' marks carry tooltips
    # (the lone post run, the sweep's diverged run and its failed one).
    assert re.search(r'data-legend-repeats="0"', body.group(1)), body.group(0)
    marks = re.search(r'data-marks="(\d+)"', body.group(1))
    assert marks and int(marks.group(1)) >= 3, body.group(0)
    assert errors.group(1) == "", errors.group(1)
    console = [l for l in p.stderr.splitlines() if "CONSOLE" in l and "Uncaught" in l]
    assert not console, console
    shot = out.parent / "report.png"
    p = subprocess.run([*args, f"--screenshot={shot}", "--window-size=1280,4000", "--hide-scrollbars",
                        out.as_uri()], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and shot.exists() and shot.stat().st_size > 10000, p.stderr[-2000:]
    if os.environ.get("NORMLAB_REPORT_SHOT"):
        shutil.copy(shot, os.environ["NORMLAB_REPORT_SHOT"])
