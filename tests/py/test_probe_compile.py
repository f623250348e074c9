"""normlab.torch.Probe on torch.compile'd models, in both orders: attached before compiling (dynamo
traces the hooks into the graph) and given the compiled OptimizedModule (the probe maps its
_orig_mod and has dynamo retrace). Every diagnostic field equals the eager loop's on the same
weights and batches; dynamo's counters show no graph break and one graph per kind of step
(probed, unprobed), never a recompile per probed step. Where the compiled graph does not run the
hooks, the fields are null, a warning says so once, the `missing` event names them, and doctor
lists the checks that needed them as not checked instead of calling the run healthy.

The backend is aot_eager (dynamo and AOTAutograd, the graph run by eager kernels): what the probe
depends on is dynamo's tracing of the hooks; inductor compiles the same graph, and
bench/probe_overhead.py --compile runs it on inductor (docs/benchmarks.md)."""
from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch
from torch._dynamo.utils import counters

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab.torch as ntorch
from normlab_cli import normlab as normlab_cli
from probe_fixtures import V, hf_model, markov_batches

STEPS, INTERVAL = 3, 2
SKIP = ("time_s", "tokens_per_s", "wall_s")


def run(model, call, out, steps=STEPS, before=None, interval=INTERVAL, backend=None):
    """A loop over `call` (the model or its compiled wrapper); the probe attached to `before`
    (default: call) at the start; `backend`: `call` compiled with it once the probe is attached.
    Returns the metrics.jsonl lines."""
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    idx, tgt = markov_batches(steps)
    with ntorch.Probe(before if before is not None else call, opt, out=out, interval=interval,
                      per_head=True) as probe:
        if backend is not None:
            call = torch.compile(call, backend=backend)
        for s in range(steps):
            logits = call(input_ids=idx[s]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), tgt[s].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss)
    return [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines()]


def assert_same(a, b, rel=1e-4):
    """Every field of every step line equal, numbers at rel (float32 kernels may reorder)."""
    def same(x, y, where):
        if isinstance(x, dict):
            assert set(x) == set(y), where
            for k in x:
                same(x[k], y[k], f"{where}.{k}")
        elif isinstance(x, list):
            assert len(x) == len(y), where
            for i, (u, v) in enumerate(zip(x, y)):
                same(u, v, f"{where}[{i}]")
        elif isinstance(x, float):
            assert y == pytest.approx(x, rel=rel, abs=1e-6), where
        else:
            assert x == y, where
    a = [{k: v for k, v in x.items() if k not in SKIP} for x in a]
    b = [{k: v for k, v in x.items() if k not in SKIP} for x in b]
    assert len(a) == len(b)
    for x, y in zip(a, b):
        same(x, y, f"step {x.get('step')}")


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    """The eager single-process loop: the reference of every compiled run."""
    m = hf_model("llama")
    return run(m, m, tmp_path_factory.mktemp("eager") / "r")


def test_attach_then_compile_equals_eager(eager, tmp_path):
    torch._dynamo.reset()
    counters.clear()
    model = hf_model("llama")
    lines = run(model, model, tmp_path / "r", backend="aot_eager")
    assert_same(eager, lines)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    # steps 1, 2 probed, 3 not: one graph for each kind, none per probed step
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])
    assert "resid_rms" in lines[1] and "resid_rms" not in lines[2]


def test_compile_then_attach_equals_eager(eager, tmp_path):
    """The compiled model has already run (its graph traced without hooks) when the probe is
    given the OptimizedModule: the probe maps _orig_mod and has dynamo trace the hooks in."""
    torch._dynamo.reset()
    counters.clear()
    model = hf_model("llama")
    compiled = torch.compile(model, backend="aot_eager")
    idx, _ = markov_batches(1)
    compiled(input_ids=idx[0]).logits.sum().backward()  # traced; the weights do not change
    model.zero_grad()
    lines = run(model, compiled, tmp_path / "r")
    assert_same(eager, lines)
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] <= 3, dict(counters["stats"])  # before + 2
    cfg = (tmp_path / "r" / "config.toml").read_text()
    assert "LlamaForCausalLM" in cfg and "llama map" in cfg


@pytest.fixture(scope="module")
def skipped_run(tmp_path_factory):
    """A graph cached before the probe attached and not retraced (simulated: the probe's retrace
    disabled) runs no hook. Returns (run directory, its lines, the warnings)."""
    torch._dynamo.reset()
    mp = pytest.MonkeyPatch()
    mp.setattr(ntorch, "_forget_compiled", lambda model: None)
    model = hf_model("llama")
    compiled = torch.compile(model, backend="aot_eager")
    idx, _ = markov_batches(1)
    compiled(input_ids=idx[0]).logits.sum().backward()
    model.zero_grad()
    out = tmp_path_factory.mktemp("skipped") / "r"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        lines = run(model, compiled, out)
    mp.undo()
    return out, lines, [str(w.message) for w in caught]


def test_hooks_the_graph_skips_are_recorded_missing(skipped_run):
    """Forward fields null, one warning, one `missing` event; gradients still measured; no step
    counted non-finite."""
    _, lines, caught = skipped_run
    assert len([w for w in caught if "forward statistics missing" in w]) == 1, caught
    events = [x for x in lines if x.get("event") == "missing"]
    assert len(events) == 1 and events[0]["step"] == 1
    assert {"attn_max_logit", "attn_entropy", "resid_rms", "log_z_mean"} <= set(
        events[0]["fields"])
    assert "compiled" in events[0]["reason"]
    probed = [x for x in lines if "grad_norm_block" in x]
    assert len(probed) == 2
    for x in probed:
        assert x["attn_max_logit"] == [None, None] and x["log_z_mean"] is None
        assert all(v is None for v in x["resid_rms"])
        assert all(v > 0 for v in x["grad_norm_block"])
    assert all(not x["nonfinite"] for x in lines if "event" not in x)


def test_doctor_does_not_call_a_run_without_forward_statistics_healthy(skipped_run):
    out = skipped_run[0]
    d = json.loads(normlab_cli("doctor", out, "--json", check=0).stdout)
    assert not d["verdict"].startswith("healthy"), d["verdict"]
    assert d["verdict"].startswith("not judged") or d["not_checked"], d
    needs = {n for c in d["not_checked"] for n in c["needs"]}
    assert "attn_max_logit" in needs
    assert any("compiled" in c["reason"] for c in d["not_checked"])


def test_statistics_match_under_compile_with_padding(tmp_path):
    """attention_mask with left padding: the compiled probed step counts real tokens only and
    its statistics equal the eager probe's over the same real tokens."""
    idx, tgt = markov_batches(2)
    mask = torch.ones_like(idx[0])
    mask[0, :5] = 0
    out = []
    for name, comp in (("eager", False), ("compiled", True)):
        torch._dynamo.reset()
        model = hf_model("llama")
        call = torch.compile(model, backend="aot_eager") if comp else model
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        with ntorch.Probe(model, opt, out=tmp_path / name, interval=1) as probe:
            for s in range(2):
                logits = call(input_ids=idx[s], attention_mask=mask).logits
                loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                         tgt[s].reshape(-1))
                loss.backward()
                opt.step()
                opt.zero_grad()
                probe.step(loss)
        out.append([json.loads(x) for x in (tmp_path / name / "metrics.jsonl").read_text()
                    .splitlines()])
    assert_same(out[0], out[1])
    assert [x["tokens"] for x in out[1][:2]] == [27, 54]  # 2 x 16 - 5 pads per step
    assert all(math.isfinite(v) for v in out[1][0]["attn_entropy"])
