"""docs/python.md, "A nanoGPT-style run, diagnosed": the script shown is
examples/probe_nanogpt.py, it runs, and `normlab doctor` and `normlab report` read its run, doctor
with the verdict the docs show."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from normlab_cli import BUILD, normlab

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "python.md"
EXAMPLE = ROOT / "examples" / "probe_nanogpt.py"


def _block(marker: str) -> str:
    m = re.search(rf"<!-- {marker} -->\n```[a-z]*\n(.*?)```\n<!-- /{marker} -->",
                  DOCS.read_text(), flags=re.S)
    assert m, f"docs/python.md has no <!-- {marker} --> block"
    return m.group(1)


def test_docs_show_the_example_file():
    assert _block("probe-example") == EXAMPLE.read_text()
    code = [x for x in EXAMPLE.read_text().splitlines() if x.strip()]
    assert len(code) <= 43, f"the example has {len(code)} non-blank lines"


def test_example_runs_and_doctor_gives_the_documented_verdict(tmp_path):
    run = tmp_path / "nanogpt"
    # one thread: 7 s alone, where two took 154 s beside other tests on a loaded 2-core machine
    # (the doctor output is the same either way)
    env = dict(os.environ, PYTHONPATH=str(Path(BUILD) / "python"), OMP_NUM_THREADS="1")
    p = subprocess.run([sys.executable, str(EXAMPLE), str(run)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["event"] == "end" and lines[-1]["step"] == 300
    assert sum(1 for x in lines if "attn_max_logit_head" in x) == 13  # steps 1, 25, ..., 300
    out = normlab("doctor", run, check=0).stdout
    documented = _block("probe-doctor")
    verdict = [x for x in out.splitlines() if x.startswith("verdict: ")]
    assert verdict == [x for x in documented.splitlines() if x.startswith("verdict: ")], out
    assert "healthy" in verdict[0]
    # the run line as documented (the numbers below it may move in the last digits on another
    # CPU: PyTorch's float32 kernels differ)
    assert out.splitlines()[1] == documented.splitlines()[1], out
    normlab("report", run, "--out", tmp_path / "report.html", check=0)
    assert "<svg" in (tmp_path / "report.html").read_text()
