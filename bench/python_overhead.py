"""Overhead of the Python package: config a of bench/ (bench/bench_config.cpp: V=256 C=384 L=6 H=6
F=1536 T=256 B=8, pre, layernorm, gelu_tanh, learned positions, tied) trained through the CLI
(`normlab train`) and through `normlab.train` (with a callback on every logged step), alternately,
each in a fresh process, with the same steps and threads. Prints the trainer's tokens/s (the run
average of the end event in metrics.jsonl) of both, their medians and the ratio.

    .venv/bin/python bench/python_overhead.py            # ROUNDS=3 STEPS=30 THREADS=2
    BUILD_DIR=build ROUNDS=5 STEPS=50 .venv/bin/python bench/python_overhead.py

The package is imported from $BUILD_DIR/python (built with -DNORMLAB_PYTHON=ON).
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUILD = Path(os.environ.get("BUILD_DIR", ROOT / "build")).resolve()
ROUNDS = int(os.environ.get("ROUNDS", 3))
STEPS = int(os.environ.get("STEPS", 30))
THREADS = int(os.environ.get("THREADS", 2))

CONFIG_A = {
    "model": {"vocab_size": 256, "d_model": 384, "n_layer": 6, "n_head": 6, "d_ff": 1536,
              "seq_len": 256, "placement": "pre", "norm": "layernorm", "mlp": "gelu_tanh",
              "pos": "learned", "tie_embeddings": True},
    "optim": {"warmup_steps": 10},
    "train": {"batch_size": 8, "steps": STEPS, "threads": THREADS, "log_interval": 10,
              "eval_interval": 10 ** 6, "eval_batches": 1, "checkpoint_interval": 10 ** 6},
}

PY_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
import normlab
logged = []
normlab.train(json.loads(sys.argv[2]), out=sys.argv[3], callback=lambda r: logged.append(r["step"]),
              progress=False)  # no tqdm bar: the same work whether or not stderr is a terminal
assert logged, "the callback saw no step"
"""


def end_tokens_per_s(run_dir: Path) -> float:
    ends = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()
            if '"event":"end"' in line.replace(" ", "")]
    return float(ends[-1]["tokens_per_s"])


def main() -> None:
    sets = [f"--set={s}.{k}={str(v).lower() if isinstance(v, bool) else v}"
            for s, kv in CONFIG_A.items() for k, v in kv.items()]
    cli_rates, py_rates = [], []
    load = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(ROUNDS):
            load.append(os.getloadavg()[0])
            for kind in (("cli", "py") if r % 2 == 0 else ("py", "cli")):
                out = Path(tmp) / f"{kind}_{r}"
                if kind == "cli":
                    subprocess.run([str(BUILD / "normlab"), "train", "--out", str(out), *sets],
                                   check=True, stdout=subprocess.DEVNULL)
                    cli_rates.append(end_tokens_per_s(out))
                else:
                    subprocess.run([sys.executable, "-c", PY_RUN, str(BUILD / "python"),
                                    json.dumps(CONFIG_A), str(out)], check=True)
                    py_rates.append(end_tokens_per_s(out))
                print(f"round {r + 1}/{ROUNDS} {kind:3s} {(cli_rates if kind == 'cli' else py_rates)[-1]:8.0f} tokens/s",
                      flush=True)
    cli, py = statistics.median(cli_rates), statistics.median(py_rates)
    print(f"\nconfig a, {STEPS} steps, {THREADS} threads, {ROUNDS} rounds (alternating order)")
    print(f"CLI           {cli:8.0f} tokens/s (median; rounds {', '.join(f'{x:.0f}' for x in cli_rates)})")
    print(f"normlab.train {py:8.0f} tokens/s (median; rounds {', '.join(f'{x:.0f}' for x in py_rates)})")
    print(f"ratio Python / CLI {py / cli:.3f} ({100 * (py / cli - 1):+.1f}%)")
    print(f"load average (1 min) at the start of each round: {', '.join(f'{x:.2f}' for x in load)} "
          f"on {os.cpu_count()} CPU(s)")


if __name__ == "__main__":
    main()
