"""normlab.torch.Probe under torch.distributed on CPU (gloo, 2 processes): the same Llama, weights
and global batches trained 20 steps in one process, with DDP on 2 processes and with FSDP2 on 2
processes (tests/py/probe_dist_worker.py). Every field of every step line equal across the three
at float32 tolerance (the processes' gradients are reduced in another order than one process
sums them: the runs drift apart by float32 rounding over 20 AdamW steps); only process 0 writes;
config.toml records the world size and the sharding."""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import normlab_py  # noqa: F401  (imports normlab from the build tree)
import normlab

HERE = Path(__file__).resolve().parent
SKIP = ("time_s", "tokens_per_s", "wall_s")
REL = 1e-5  # largest relative error measured: 1.4e-6 (DDP and FSDP2; docs/python.md)


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(normlab_py.PKG), str(HERE)])
    return dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", **extra)


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    worker = [sys.executable, str(HERE / "probe_dist_worker.py"), str(out)]
    single = subprocess.Popen(worker + ["single"], env=_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    port = str(_port())
    procs = [subprocess.Popen(worker + ["ddp,fsdp2"], env=_env(
        RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
        MASTER_PORT=port), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(2)]
    for p in [single] + procs:
        text, _ = p.communicate(timeout=600)
        assert p.returncode == 0, text[-3000:]
    return out


def lines_of(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]


def rel_errors(a, b, where=""):
    """(largest relative error over the numbers, with where) of two equal-shaped records."""
    if isinstance(a, dict):
        assert set(a) == set(b), (where, set(a) ^ set(b))
        return max([rel_errors(a[k], b[k], f"{where}.{k}") for k in a] or [(0.0, where)])
    if isinstance(a, list):
        assert len(a) == len(b), where
        return max([rel_errors(x, y, f"{where}[{i}]") for i, (x, y) in enumerate(zip(a, b))]
                   or [(0.0, where)])
    if isinstance(a, float) or isinstance(b, float):
        assert a is not None and b is not None, where
        return abs(a - b) / max(abs(a), abs(b), 1e-6), where
    assert a == b, where
    return 0.0, where


@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_distributed_equals_single_process(runs, mode):
    ref = [{k: v for k, v in x.items() if k not in SKIP} for x in lines_of(runs / "single")]
    got = [{k: v for k, v in x.items() if k not in SKIP} for x in lines_of(runs / mode)]
    assert len(got) == len(ref) == 21
    assert sum(1 for x in got if "attn_entropy" in x) == 5  # steps 1, 5, 10, 15, 20
    assert [x["tokens"] for x in got[:2]] == [64, 128]  # both processes' tokens
    err, where = max(rel_errors(x, y, f"step {x.get('step')}") for x, y in zip(ref, got))
    print(f"{mode}: largest relative error {err:.2e} at {where}")
    assert err < REL, (err, where)
    cfg = normlab.Config(runs / mode)
    assert (cfg["source.world_size"], cfg["source.sharding"]) == (2, mode)
    assert cfg["train.batch_size"] == 2  # per process, as normlab's
    one = normlab.Config(runs / "single")
    assert (one["source.world_size"], one["source.sharding"]) == (1, "none")


def test_doctor_reads_where_the_ddp_run_came_from(runs):
    from normlab_cli import normlab as normlab_cli
    out = normlab_cli("doctor", runs / "ddp", check=0).stdout.splitlines()
    assert out[1].startswith("source: a PyTorch run (loop, 2 processes, ddp"), out
