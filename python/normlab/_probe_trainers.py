"""normlab.torch.Probe inside the trainers people use: Hugging Face ``transformers.Trainer``
(``TrainerCallback``) and Lightning (``LightningCallback``). Each is built on first use
(``normlab.torch.TrainerCallback``), so that neither library is needed to import normlab.torch.

What each reads, and when (docs/python.md, "Trainers"):
- Trainer clips between the backward pass and ``on_pre_optimizer_step``, so the callback reads the
  gradients at the end of every backward pass, after the backward's other final callbacks (under
  DDP, after the one that writes the all-reduced gradients into ``.grad``); the last
  micro-batch's read is the step's: the accumulated gradient before clipping, the norm Trainer
  logs. The learning rate from the optimizer in its step pre-hook (what the scheduler set for
  the step); the loss from the model's output (the micro-batches' mean, or their sum when Trainer
  passes num_items_in_batch, which makes each a share of the step's mean: under DDP, of the
  global batch's where Trainer counts the tokens of every process, so multiplied by the number
  of processes before the probe averages the processes' losses); clip, accumulation, schedule,
  warmup, weight decay, precision and the step count from ``TrainingArguments``.
- Lightning calls ``on_before_optimizer_step`` after unscaling and before clipping: the callback
  reads the gradients there; the loss from ``on_train_batch_end``'s outputs (which Lightning
  divides by ``accumulate_grad_batches``: multiplied back, the micro-batches' mean).
"""
from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn

from ._probe_maps import family_for
from .torch import Probe

# TrainingArguments.lr_scheduler_type -> normlab's optim.schedule (the others: not inferred)
_HF_SCHEDULES = {"linear": "linear", "cosine": "cosine", "constant": "constant",
                 "constant_with_warmup": "constant"}


def _mapped(module: nn.Module) -> nn.Module:
    """The module a family record knows: the module itself or the first such submodule (a
    LightningModule holding a Hugging Face model)."""
    for m in module.modules():
        if family_for(m) is not None:
            return m
    return module


def _training_args_config(args: Any, state: Any) -> tuple[dict[str, Any], list[str]]:
    """normlab keys from TrainingArguments (and the TrainerState's planned steps)."""
    steps = int(getattr(state, "max_steps", 0) or 0)
    cfg: dict[str, Any] = {
        "optim.grad_clip": float(args.max_grad_norm or 0.0),
        "train.grad_accum": int(args.gradient_accumulation_steps),
        "optim.weight_decay": float(args.weight_decay), "optim.lr": float(args.learning_rate)}
    unknown = []
    if steps > 0:
        cfg["train.steps"] = steps
        cfg["optim.warmup_steps"] = int(args.get_warmup_steps(steps))
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    if kind in _HF_SCHEDULES:
        cfg["optim.schedule"] = _HF_SCHEDULES[kind]
        if kind in ("linear", "cosine"):
            cfg["optim.min_lr_ratio"] = 0.0  # Trainer decays to 0
    else:
        unknown.append("optim.schedule")
    if args.bf16:
        cfg["train.matmul_precision"] = "bf16"
    elif args.fp16:  # normlab has no fp16 training: not described by any key
        unknown.append("train.matmul_precision")
    return cfg, unknown


@functools.cache
def trainercallback() -> type:
    import transformers

    class TrainerCallback(transformers.TrainerCallback):
        """normlab.torch.Probe for transformers.Trainer:
        ``Trainer(..., callbacks=[normlab.torch.TrainerCallback(out="runs/mine", interval=25)])``.
        ``config``: normlab keys over what the callback reads; other keywords go to Probe."""

        def __init__(self, out: str = "runs/probe", interval: int = 25,
                     config: dict[str, Any] | None = None, **probe_kw: Any) -> None:
            self.out, self.interval, self.config, self.kw = out, interval, config or {}, probe_kw
            self.probe: Probe | None = None
            self._losses: list[torch.Tensor] = []
            self._sum = False
            self._due: dict[str, Any] | None = None
            self._hook: Any = None

        def on_train_begin(self, args, state, control, model=None, optimizer=None, **kw):
            cfg, unknown = _training_args_config(args, state)
            cfg.update(self.config)
            inner = _mapped(model)
            mode = str(getattr(args.parallel_mode, "value", args.parallel_mode))
            ddp = mode == "distributed" and not (getattr(args, "fsdp", None) or
                                                 getattr(args, "deepspeed", None))
            self.probe = Probe(inner, optimizer, out=self.out, interval=self.interval, config=cfg,
                               trainer="transformers.Trainer", grads="backward",
                               sharding="ddp" if ddp else None, **self.kw)  # accelerate's DDP
            self.probe.extra_unknown = unknown
            self._hook = inner.register_forward_hook(self._loss_of, with_kwargs=True)

        def _loss_of(self, module, args, kwargs, out) -> None:
            loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
            if torch.is_grad_enabled() and isinstance(loss, torch.Tensor):
                self._losses.append(loss.detach().float())
                self._sum = kwargs.get("num_items_in_batch") is not None

        def on_step_end(self, args, state, control, **kw):
            if self.probe is None:
                return
            self._record()  # the previous step, if an evaluation did not already
            losses = torch.stack(self._losses) if self._losses else torch.tensor(float("nan"))
            loss = losses.mean()
            if self._sum:  # shares of the step's mean: of the global batch's when Trainer
                # counts the tokens over every process (average_tokens_across_devices), and the
                # probe averages the processes' losses
                world = self.probe.world_size if getattr(
                    args, "average_tokens_across_devices", False) else 1
                loss = losses.sum() * world
            self._due = {"loss": loss}
            self._losses = []

        def _record(self) -> None:
            if self._due is not None:
                due, self._due = self._due, None
                self.probe.step(**due)

        def on_step_begin(self, args, state, control, **kw):
            if self.probe is not None:
                self._record()  # before this step's forward: the probe arms for it

        def on_evaluate(self, args, state, control, metrics=None, **kw):
            if self._due is not None and metrics and "eval_loss" in metrics:
                self._due["val_loss"] = float(metrics["eval_loss"])

        def on_train_end(self, args, state, control, **kw):
            if self.probe is not None:
                self._record()
                self._hook.remove()
                self.probe.close()

    return TrainerCallback


@functools.cache
def lightningcallback() -> type:
    try:
        import lightning.pytorch as pl
    except ImportError:
        try:
            import pytorch_lightning as pl
        except ImportError as e:
            raise ImportError("normlab.torch.LightningCallback needs lightning (pip install "
                              "lightning)") from e

    class LightningCallback(pl.Callback):
        """normlab.torch.Probe for Lightning:
        ``L.Trainer(..., callbacks=[normlab.torch.LightningCallback(out="runs/mine")])``. The
        probe maps the LightningModule's model (a family it knows, or ``map=``)."""

        def __init__(self, out: str = "runs/probe", interval: int = 25,
                     config: dict[str, Any] | None = None, **probe_kw: Any) -> None:
            self.out, self.interval, self.config, self.kw = out, interval, config or {}, probe_kw
            self.probe: Probe | None = None
            self._losses: list[torch.Tensor] = []

        def on_train_start(self, trainer, pl_module):
            opt = trainer.optimizers[0]
            cfg: dict[str, Any] = {"train.grad_accum": int(trainer.accumulate_grad_batches)}
            clip = trainer.gradient_clip_val
            if not clip:  # Lightning does not clip
                cfg["optim.grad_clip"] = 0.0
            elif trainer.gradient_clip_algorithm in (None, "norm"):
                cfg["optim.grad_clip"] = float(clip)
            if trainer.max_steps and trainer.max_steps > 0:
                cfg["train.steps"] = int(trainer.max_steps)
            if str(trainer.precision).startswith("bf16"):
                cfg["train.matmul_precision"] = "bf16"
            sched = trainer.lr_scheduler_configs[0].scheduler if trainer.lr_scheduler_configs \
                else None
            cfg.update(self.config)
            ddp = isinstance(trainer.strategy, pl.strategies.DDPStrategy)
            self.probe = Probe(_mapped(pl_module), opt, out=self.out, interval=self.interval,
                               config=cfg, trainer="lightning", grads="caller",
                               scheduler=sched, sharding="ddp" if ddp else None, **self.kw)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            if self.probe is not None:  # unscaled, before Lightning clips
                self.probe.read_grads()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if self.probe is None:
                return
            loss = outputs["loss"] if isinstance(outputs, dict) else outputs
            if isinstance(loss, torch.Tensor):  # Lightning divided it by the accumulation
                self._losses.append(loss.detach().float() * trainer.accumulate_grad_batches)
            p = self.probe
            if p._opt_steps > p._opt_steps_recorded:  # the optimizer stepped: a step ends
                p.step(torch.stack(self._losses).mean() if self._losses else float("nan"))
                self._losses = []

        def on_train_end(self, trainer, pl_module):
            if self.probe is not None:
                self.probe.close()

    return LightningCallback
