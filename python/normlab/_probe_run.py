"""The run directory normlab.torch.Probe writes: metrics.jsonl in normlab's schema (docs/metrics.md:
step lines, diagnostics fields on the probed steps, the end event) and config.toml, a normlab
config holding what the probe could tell of the model and the optimizer, so that `normlab doctor`,
`normlab report` and the lab read the run as one of normlab's own."""
from __future__ import annotations

import collections
import json
import math
import os
from pathlib import Path
from typing import Any

# The spike guard's test (src/train/guard.cpp, train.spike_window / train.spike_threshold at their
# defaults): a finite step whose loss or gradient norm lies more than 6 standard deviations (over
# the last 50 finite steps, population) above their mean. The probe only flags; it never skips.
SPIKE_WINDOW = 50
SPIKE_THRESHOLD = 6.0
# The end event's train loss: the mean over the last 20 finite steps (docs/metrics.md).
TRAIN_LOSS_STEPS = 20


def _zscore(window: collections.deque, x: float) -> float:
    mean = sum(window) / len(window)
    sd = math.sqrt(sum((v - mean) ** 2 for v in window) / len(window))
    return (x - mean) / sd if sd > 0 else 0.0


class SpikeFlags:
    """The z-score spike test over the last SPIKE_WINDOW finite steps."""

    def __init__(self) -> None:
        self.loss: collections.deque = collections.deque(maxlen=SPIKE_WINDOW)
        self.grad: collections.deque = collections.deque(maxlen=SPIKE_WINDOW)

    def observe(self, loss: float, grad_norm: float) -> bool:
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            return False
        spike = len(self.loss) == SPIKE_WINDOW and (
            _zscore(self.loss, loss) > SPIKE_THRESHOLD or _zscore(self.grad, grad_norm) > SPIKE_THRESHOLD)
        self.loss.append(loss)
        self.grad.append(grad_norm)
        return spike


def finite_or_none(v: Any) -> Any:
    """A non-finite number as null, as normlab writes it; lists element-wise."""
    if isinstance(v, list):
        return [finite_or_none(x) for x in v]
    if isinstance(v, dict):
        return {k: finite_or_none(x) for k, x in v.items()}
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class RunWriter:
    """Appends metrics.jsonl lines (flushed per call) and writes config.toml atomically."""

    def __init__(self, out: str | os.PathLike, history: list[str] | None = None) -> None:
        self.dir = Path(out)
        self.dir.mkdir(parents=True, exist_ok=True)
        # A fresh run: a rerun (a sweep retrying an unfinished point) starts the file anew; a
        # resumed one starts it with the records of its checkpoint's run up to the checkpoint.
        self._f = open(self.dir / "metrics.jsonl", "w", encoding="utf-8")
        for line in history or []:
            self._f.write(line + "\n")
        self._f.flush()
        self.spikes = SpikeFlags()
        self.recent: collections.deque = collections.deque(maxlen=TRAIN_LOSS_STEPS)
        self.last_val_loss: float | None = None

    def state(self) -> dict[str, Any]:
        """What the records after a checkpoint depend on: the spike test's window, the recent
        losses, the last validation loss."""
        return {"spike_loss": list(self.spikes.loss), "spike_grad": list(self.spikes.grad),
                "recent": list(self.recent), "last_val_loss": self.last_val_loss}

    def restore(self, st: dict[str, Any]) -> None:
        self.spikes.loss.extend(st["spike_loss"])
        self.spikes.grad.extend(st["spike_grad"])
        self.recent.extend(st["recent"])
        self.last_val_loss = st["last_val_loss"]

    def write(self, record: dict[str, Any]) -> None:
        self._f.write(json.dumps(finite_or_none(record), allow_nan=False) + "\n")
        self._f.flush()

    def step_line(self, rec: dict[str, Any]) -> dict[str, Any]:
        """Completes a step record with the guard's flags and writes it."""
        loss, gn = rec["loss"], rec["grad_norm"]
        # an unknown gradient norm (None: written as null) is not a non-finite step
        finite = math.isfinite(loss) and (gn is None or math.isfinite(gn))
        rec["spike"] = gn is not None and self.spikes.observe(loss, gn)
        rec["nonfinite"] = not finite
        rec["skipped"] = False
        rec["skipped_total"] = 0
        if finite:
            self.recent.append(loss)
        if rec.get("val_loss") is not None:
            self.last_val_loss = rec["val_loss"]
        self.write(rec)
        return rec

    def end(self, step: int, reason: str, detail: str, tokens_per_s: float, wall_s: float) -> None:
        n = len(self.recent)
        self.write({"event": "end", "step": step, "reason": reason, "detail": detail,
                    "train_loss": sum(self.recent) / n if n else None, "train_loss_steps": n,
                    "val_loss": self.last_val_loss, "tokens_per_s": tokens_per_s,
                    "wall_s": wall_s})
        self._f.close()

    def write_config(self, toml_text: str) -> None:
        tmp = self.dir / "config.toml.tmp"
        tmp.write_text(toml_text, encoding="utf-8")
        os.replace(tmp, self.dir / "config.toml")
