"""normlab.torch.Probe on a model compiled with torch.compile's default backend, inductor (on CPU:
C++ kernels generated and built with g++), the probe attached first: dynamo traces the hooks with
no graph break, one graph serves every probed step, and every recorded field equals an eager
probe's on the same weights and batches at rel 1e-4 (test_probe_compile.assert_same; inductor fuses
and reorders float32 reductions: largest error measured 3.5e-6, 2 steps, tiny Llama).

test_probe_compile.py runs the same paths on the aot_eager backend (fast: no code generation).
Here every step is probed (interval 1) and there are 2 steps, so inductor compiles one forward and
one backward graph: this file took 57 s with a cold inductor cache (TORCHINDUCTOR_CACHE_DIR empty)
on the shared 2-core machine at load 8, 11 s with a warm one; most of it is g++."""
from __future__ import annotations

from pathlib import Path

import torch
from torch._dynamo.utils import counters

import normlab_py  # noqa: F401  (imports normlab from the build tree)
from probe_fixtures import hf_model
from test_probe_compile import assert_same, run

STEPS = 2


def _run(out: Path, backend: str | None) -> list[dict]:
    """STEPS of AdamW on the tiny Llama, every step probed; compiled after the probe attached when
    `backend` is given. Returns the metrics.jsonl lines."""
    torch._dynamo.reset()
    counters.clear()
    model = hf_model("llama")
    return run(model, model, out, steps=STEPS, interval=1, backend=backend)


def test_inductor_equals_eager(tmp_path):
    ref = _run(tmp_path / "eager", None)
    got = _run(tmp_path / "inductor", "inductor")
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])  # no recompile
    assert len(got) == STEPS + 1 and got[-1]["event"] == "end"
    for x in got[:-1]:  # the forward statistics were measured (not null), on every step
        assert all(v is not None for v in x["attn_max_logit"] + x["resid_rms"]), x
        assert x["log_z_mean"] is not None and x["attn_max_logit_head"][1][0] is not None
    assert_same(ref, got)
