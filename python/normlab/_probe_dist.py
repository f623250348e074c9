"""normlab.torch.Probe under torch.distributed (DDP, FSDP2): which process writes, what the
processes' values combine into, and the one collective of a flush.

Every process probes the same steps and measures its own tokens; at each flush (every probed
step, and close()) the processes exchange their pending values in ONE all_gather of a flat float32
vector, and every process combines them alike: losses averaged, tokens summed, activation
statistics pooled over every process's tokens (RMS as the root of the mean square over all of
them, maxima as the max; _probe_stats.combine_*), gradient and update sums of squares summed over
the shards under FSDP2 (DTensor parameters: each process holds a shard) and taken from process 0
under DDP (its gradients are all-reduced: every process holds the same). Only process 0 writes the
run directory.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import nn


class Dist:
    """The process group the probe reduces over (world 1: no collective at all)."""

    def __init__(self, model: nn.Module, wrappers: list[str], sharding: str | None = None) -> None:
        self.world, self.rank, self.group = 1, 0, None
        d = torch.distributed
        if d.is_available() and d.is_initialized():
            self.world, self.rank = d.get_world_size(), d.get_rank()
        self.sharded = any(is_dtensor(p) for p in model.parameters())
        if self.sharded:
            self.sharding = "fsdp2"
        elif "ddp" in wrappers:
            self.sharding = "ddp"
        else:
            self.sharding = "none" if self.world == 1 else "replicated"
        if sharding is not None and self.sharding == "replicated":  # DDP applied out of sight
            self.sharding = sharding

    def gather(self, vec: torch.Tensor) -> list[list[float]]:
        """Every process's vec (same length on all), as host lists, in rank order."""
        if self.world == 1:
            return [vec.tolist()]
        out = vec.new_empty((self.world, vec.numel()))
        # gloo has no all_gather_into_tensor: all_gather into the rows
        torch.distributed.all_gather(list(out.unbind(0)), vec, group=self.group)
        return out.tolist()


def is_dtensor(t: Any) -> bool:
    return type(t).__name__ == "DTensor"


def local(t: torch.Tensor) -> torch.Tensor:
    """This process's part of a tensor (a DTensor's local shard)."""
    return t.to_local() if is_dtensor(t) else t


class NullWriter:
    """The run writer of processes other than 0: writes nothing."""

    def write(self, record: dict[str, Any]) -> None:
        pass

    def step_line(self, rec: dict[str, Any]) -> dict[str, Any]:
        return rec

    def end(self, *args: Any) -> None:
        pass

    def write_config(self, toml_text: str) -> None:
        pass

    def state(self) -> dict[str, Any]:
        return {}

    def restore(self, st: dict[str, Any]) -> None:
        pass
