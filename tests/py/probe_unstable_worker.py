"""One process of a DDP run made unstable on purpose (tests/py/test_probe_doctor_paths.py), started
as torchrun would (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT in the environment): gloo, then
probe_fixtures.unstable_run of each case in mode "ddp" into OUT/CASE.
Usage: probe_unstable_worker.py OUT CASE[,CASE...] STEPS[,STEPS...] (each case's length)"""
from __future__ import annotations

import os
import sys

import torch

torch.set_num_threads(1)
from probe_fixtures import unstable_run  # noqa: E402


def main() -> None:
    out, cases = sys.argv[1], sys.argv[2].split(",")
    steps = [int(n) for n in sys.argv[3].split(",")]
    world, rank = int(os.environ["WORLD_SIZE"]), int(os.environ["RANK"])
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    for case, n in zip(cases, steps, strict=True):
        unstable_run(case, os.path.join(out, case), mode="ddp", rank=rank, world=world, steps=n)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()  # an error raises here and exits non-zero
    # The work is done and written: leave without the interpreter's teardown, where gloo's threads
    # abort the process in about 1 run of 8 ("terminate called without an active exception").
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
