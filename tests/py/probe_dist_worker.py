"""One process of the distributed probe test (tests/py/test_probe_dist.py), started as torchrun
would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment), or alone as the
single-process reference (no RANK). Trains the tiny Llama of probe_fixtures for STEPS steps on
global batches of GLOBAL_B sequences (process r takes rows r*b .. (r+1)*b - 1) with the probe at
INTERVAL, once per mode: "ddp" (DistributedDataParallel) and "fsdp2" (fully_shard of each block
and the root), or "single" alone. Usage: probe_dist_worker.py OUT MODE[,MODE...]"""
from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(1)
import normlab.torch as ntorch  # noqa: E402
from probe_fixtures import V, hf_model, markov_batches  # noqa: E402

STEPS, INTERVAL, GLOBAL_B = 20, 5, 4


def train(mode: str, out: str, rank: int, world: int) -> None:
    model = hf_model("llama")
    call = model
    if mode == "ddp":
        call = torch.nn.parallel.DistributedDataParallel(model)
    elif mode == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.1)
    idx, tgt = markov_batches(STEPS, b=GLOBAL_B)
    b = GLOBAL_B // world
    rows = slice(rank * b, (rank + 1) * b)
    with ntorch.Probe(call, opt, out=os.path.join(out, mode), interval=INTERVAL,
                      per_head=True) as probe:
        for s in range(STEPS):
            logits = call(input_ids=idx[s, rows]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                     tgt[s, rows].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            probe.step(loss)


def main() -> None:
    out, modes = sys.argv[1], sys.argv[2].split(",")
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    for mode in modes:
        train(mode, out, rank, world)
    if world > 1:
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()  # an error raises here and exits non-zero
    # The work is done and written: leave without the interpreter's teardown, where gloo's threads
    # abort the process in about 1 run of 8 ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
