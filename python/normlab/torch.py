"""normlab's diagnostics on a PyTorch training loop (docs/python.md, "Probing a PyTorch run").

    probe = normlab.torch.Probe(model, optimizer, out="runs/mine", interval=25)
    for step in range(steps):
        loss = model(x, y).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        probe.step(loss)
    probe.close()            # or use the probe as a context manager around the loop

The probe writes a normlab run directory (metrics.jsonl in normlab's schema, config.toml, the end
event) that ``normlab doctor``, ``normlab report`` and the lab read as one of normlab's runs. Every
step gets a line (loss, learning rate, gradient norm, spike flags); every ``interval``-th step
(and step 1) also gets normlab's diagnostics fields, measured by hooks that are attached only for
that step's forward pass. PyTorch is imported here only: ``import normlab`` does not need it.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import _probe_checkpoint as _ck
from ._probe_checkpoint import load_checkpoint
from ._probe_config import SCHEDULER_NAMES, config_text
from ._probe_fields import GROUPS as _GROUPS, diag_fields
from ._probe_dist import Dist, NullWriter, is_dtensor, local
from ._probe_hooks import FIELDS, ForwardHooks, first_tensor
from ._probe_maps import FAMILIES, Resolved, resolve
from ._probe_run import RunWriter

__all__ = ["Probe", "FAMILIES", "unwrap", "load_checkpoint", "TrainerCallback",
           "LightningCallback"]


def __getattr__(name: str) -> Any:
    """TrainerCallback and LightningCallback, imported on first use: normlab.torch does not need
    transformers or lightning."""
    if name in ("TrainerCallback", "LightningCallback"):
        from . import _probe_trainers
        return getattr(_probe_trainers, name.lower())()
    raise AttributeError(f"module 'normlab.torch' has no attribute {name!r}")

def _flat(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """{"optim": {"lr": 1}} or {"optim.lr": 1} as {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in (cfg or {}).items():
        if isinstance(v, Mapping):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


def unwrap(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """The model under torch.compile's OptimizedModule (``_orig_mod``) and DDP's ``module``, and
    the wrappers found, outermost first ("compile", "ddp")."""
    found = []
    while True:
        if hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule":
            found.append("compile")
            model = model._orig_mod
        elif type(model).__name__ == "DistributedDataParallel":
            found.append("ddp")
            model = model.module
        else:
            return model, found


def _forget_compiled(model: nn.Module) -> None:
    """Drops dynamo's compiled code of the model's forward, so that its next call is traced again,
    with the probe's hooks (dynamo does not guard on module hooks: a graph traced before they were
    attached would silently skip them). Other instances of the class recompile once too."""
    try:
        from torch._C._dynamo.eval_frame import reset_code
    except ImportError:  # a build without dynamo: nothing compiled
        return
    reset_code(type(model).forward.__code__)


class Probe:
    """Hooks a PyTorch model (and its optimizer) and writes a normlab run directory.

    ``model``: the model, or its ``torch.compile``d / DistributedDataParallel wrapper (the probe
    maps the module inside). ``interval``: the diagnostics interval (normlab's
    ``diag.interval``): step 1 and every interval-th step are probed. ``config``: normlab config
    keys that override or complete what the probe tells of the model and optimizer
    (``{"optim.grad_clip": 1.0, "train.steps": 5000, "data.path": "my_text.txt"}``);
    ``per_head``: per-head attention logits; ``map``: the module map of a model no family record
    knows (docs/python.md); ``update_ratios=False`` spares the copy of the weights a probed step
    otherwise takes; ``scheduler``: the learning-rate scheduler, whose kind names
    ``optim.schedule``; ``resume_from``: a checkpoint folder of a probed run
    (``save_checkpoint``): the run's records up to it are copied to ``out`` and the step count,
    token count and spike window continue from it; ``sharding``: how a framework that wraps
    the model out of the probe's sight replicates it over the processes ("ddp": a trainer's
    DistributedDataParallel), for config.toml. A model that cannot be mapped raises
    ``ValueError`` naming what is missing.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 out: str = "runs/probe", interval: int = 25,
                 config: Mapping[str, Any] | None = None, *, per_head: bool = False,
                 update_ratios: bool = True, map: Mapping[str, Any] | None = None,  # noqa: A002
                 scheduler: Any = None, trainer: str = "loop", grads: str = "optimizer",
                 resume_from: str | os.PathLike | None = None, sharding: str | None = None) -> None:
        if interval < 1:
            raise ValueError(f"normlab.torch.Probe: interval must be >= 1, got {interval}")
        if grads not in ("optimizer", "backward", "caller"):
            raise ValueError(f"normlab.torch.Probe: grads must be 'optimizer', 'backward' or "
                             f"'caller', got {grads!r}")
        # where the gradients are read: in the optimizer's step pre-hook (after your clipping),
        # at the end of every backward pass (before a trainer's clipping: Trainer), or when the
        # caller says (read_grads(): Lightning's on_before_optimizer_step)
        self.grads = grads
        self._grads_read, self._bw_queued = False, False
        # accelerate's AcceleratedOptimizer, Lightning's LightningOptimizer: their step calls the
        # torch optimizer's, whose hooks the probe needs
        while optimizer is not None and isinstance(getattr(optimizer, "optimizer", None),
                                                   torch.optim.Optimizer):
            optimizer = optimizer.optimizer
        self.model, self.optimizer = model, optimizer
        self.inner, self.wrappers = unwrap(model)
        self.compiled = "compile" in self.wrappers or getattr(
            self.inner, "_compiled_call_impl", None) is not None
        self.interval, self.per_head = int(interval), bool(per_head)
        self.update_ratios = bool(update_ratios)
        self.r: Resolved = resolve(self.inner, dict(map) if map is not None else None)
        self.notes = list(self.r.notes)
        self.user_cfg = _flat(config)
        for key in ("data.path", "data.tokenizer"):  # relative to this process's directory
            v = self.user_cfg.get(key)
            if isinstance(v, (str, os.PathLike)) and str(v) and os.path.exists(v):
                self.user_cfg[key] = os.path.abspath(v)
        self.scheduler_kind = SCHEDULER_NAMES.get(type(scheduler).__name__) if scheduler else None
        self.dist = Dist(self.inner, self.wrappers, sharding)
        self.trainer = trainer
        self.extra_unknown: list[str] = []  # keys a trainer callback could not read
        self.world_size, self.sharding = self.dist.world, self.dist.sharding
        p0 = next((p for _, p, *_ in self.r.params), None)
        self.device = p0.device if p0 is not None else torch.device("cpu")
        self._index_params()
        self.out = Path(out)
        self.step_count = 0
        self._t0 = time.perf_counter()
        self._t_last, self._tokens_total = self._t0, 0
        self._tokens_step, self.bt = 0, (0, 0)
        self._forwards = 0              # forwards with gradients since the last optimizer step
        self.micro_batches: list[int] = []  # forwards per optimizer step
        self._pending: list[dict[str, Any]] = []
        self.lrs: list[float] = []
        self._lr: float | None = None
        self._gsq: torch.Tensor | None = None  # this process's sum of squared gradients
        self._diag: dict[str, torch.Tensor] | None = None
        self._before: list[torch.Tensor] | None = None
        self._closed = False
        self._norm_given = False  # the last step() had grad_norm=
        self._opt_steps = 0       # optimizer steps seen, and at the last record
        self._opt_steps_recorded = 0
        self._held: dict[str, Any] | None = None  # a step() that came before optimizer.step()
        self._warned: set[str] = set()
        self._missing_said: set[str] = set()
        # A resumed run continues its checkpoint's count, history and spike window.
        resumed = _ck.read_manifest(resume_from) if resume_from is not None else None
        text = config_text(self)  # a ConfigError before anything is written or hooked
        self.writer = RunWriter(self.out, _ck.records_before(
            Path(resume_from), resumed["step"]) if resumed else None) \
            if self.dist.rank == 0 else NullWriter()
        if resumed is not None:
            st = resumed["probe"]
            self.step_count = self._opt_steps = self._opt_steps_recorded = resumed["step"]
            self._tokens_total, self.lrs = st["tokens_total"], list(st["lrs"])
            self.micro_batches = list(st["micro_batches"])
            self.writer.restore(st)
        self.writer.write_config(text)
        self.fh = ForwardHooks(self.r)
        self.fh.attach()
        if self.compiled:
            _forget_compiled(self.inner)
        self._hooks = [model.register_forward_pre_hook(self._count_tokens, with_kwargs=True)]
        if grads == "backward":
            self._hooks += [p.register_post_accumulate_grad_hook(self._on_grad)
                            for p in self._params]
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._before_update))
            self._hooks.append(optimizer.register_step_post_hook(self._after_update))
        if self._is_diag(self.step_count + 1):
            self._arm()

    def save_checkpoint(self, state: Any) -> Path | None:
        """Saves ``state`` (your model's, optimizer's and scheduler's state dicts, RNG states:
        anything ``torch.save`` takes) with the probe's own state as the checkpoint of the step
        recorded last: OUT/checkpoints/step_N/ (docs/python.md). Call it after ``probe.step``;
        process 0 writes (the others return None). Resume with ``normlab.torch.load_checkpoint``
        and ``Probe(..., resume_from=folder)``."""
        self.flush()
        if self.dist.rank != 0:
            return None
        return _ck.save(self.out, self.step_count, state, {
            "tokens_total": self._tokens_total, "lrs": self.lrs,
            "micro_batches": self.micro_batches, **self.writer.state()})

    # -- parameters -------------------------------------------------------------------------

    def _index_params(self) -> None:
        """Per parameter: its slot among the 2L sublayers (attention l, MLP L + l; 2L outside
        the blocks) and its group, as device index tensors for index_add_."""
        L = len(self.r.blocks)
        self._params = [p for _, p, *_ in self.r.params]
        sub = [l + (L if s == 1 else 0) if l >= 0 else 2 * L for _, _, l, s, _ in self.r.params]
        grp = [_GROUPS.index(g) for *_, g in self.r.params]
        self._sub_of = torch.tensor(sub, dtype=torch.long)
        self._grp_of = torch.tensor(grp, dtype=torch.long)
        self._groups_present = sorted(set(grp))
        self._grp_numel = [0] * len(_GROUPS)
        for p, g in zip(self._params, grp):
            self._grp_numel[g] += p.numel()

    def _grads(self) -> tuple[list[torch.Tensor], list[int]]:
        idx = [i for i, p in enumerate(self._params) if p.grad is not None]
        return [local(self._params[i].grad) for i in idx], idx

    def _grad_norms(self) -> None:
        """The global gradient norm (every step) and, on a probed step, the squared norms per
        sublayer and group, all on the device."""
        grads, idx = self._grads()
        if not grads:
            self._gsq = torch.zeros((), device=self.device)
            return
        sq = torch.stack([n.float() for n in torch._foreach_norm(grads)]).square()
        self._gsq = sq.sum()
        if self._diag is not None:
            L = len(self.r.blocks)
            i = torch.tensor(idx, dtype=torch.long)
            d = self._diag
            d["grad_sub"] = torch.zeros(2 * L + 1, device=sq.device).index_add_(
                0, self._sub_of[i].to(sq.device), sq)
            d["grad_grp"] = torch.zeros(len(_GROUPS), device=sq.device).index_add_(
                0, self._grp_of[i].to(sq.device), sq)

    def _on_grad(self, p: torch.Tensor) -> None:
        """A parameter's gradient is accumulated: once per backward pass, queue a read of all
        of them for the end of the pass (the last micro-batch's read is the step's)."""
        if not self._bw_queued:
            self._bw_queued = True
            torch.autograd.Variable._execution_engine.queue_callback(self._backward_end)

    def _backward_end(self) -> None:
        """The first of the backward's final callbacks that the probe queued: it queues the
        read behind every callback queued so far, so that the read comes after DDP's, which
        writes the all-reduced (averaged) gradients into ``.grad`` (DDP queues it when its last
        bucket is ready, after the probe queued this one at the first gradient; read here,
        ``.grad`` is still this process's own gradient)."""
        torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

    def _backward_done(self) -> None:
        self._bw_queued = False
        self.read_grads()

    def read_grads(self) -> None:
        """Measures the gradients now (the step's norm; per sublayer and group on a probed
        step): for callers whose framework clips between backward and the optimizer's step."""
        self._grad_norms()
        self._grads_read = True

    def _before_update(self, opt: Any, args: Any, kwargs: Any) -> None:
        lr = opt.param_groups[0]["lr"]
        self._lr = float(lr)
        # The global norm of every step, unless the loop passes its own (grad_norm=): then only
        # probed steps read the gradients.
        if self.grads == "optimizer" and (self._diag is not None or not self._norm_given):
            self._grad_norms()
        if self._diag is not None:
            if self.update_ratios:  # a copy of the weights, for the probed step only
                self._before = [local(p).detach().clone() for p in self._params]

    @torch.no_grad()
    def _after_update(self, opt: Any, args: Any, kwargs: Any) -> None:
        self._opt_steps += 1
        self._grads_read = False
        self.micro_batches.append(self._forwards)
        self._forwards = 0
        if self._diag is not None:
            self._second_moment(opt)
            if self._before is not None:  # update_ratios=True
                wn = torch._foreach_norm(self._before)
                torch._foreach_sub_(self._before, [local(p).detach() for p in self._params])
                dn = torch._foreach_norm(self._before)  # |before - after|
                self._before = None
                grp = self._grp_of.to(self.device)
                zeros = torch.zeros(len(_GROUPS), device=self.device)
                self._diag["upd_d"] = zeros.index_add(0, grp, torch.stack(dn).float().square())
                self._diag["upd_w"] = zeros.index_add(0, grp, torch.stack(wn).float().square())
        if self._held is not None:  # probe.step() came first: this step completes its record
            held, self._held = self._held, None
            self._record(**held)

    @torch.no_grad()
    def _second_moment(self, opt: Any) -> None:
        """rms_g2v: per parameter RMS(g^2 / max(v_hat, eps^2)) after the update, for optimizers
        that keep Adam's second moment as state["exp_avg_sq"] (Adam, AdamW and their kin), with
        v_hat = v / (1 - beta2^t), g the gradient the update used."""
        group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
        idx, vals, counts = [], [], []
        for i, p in enumerate(self._params):
            st, g = opt.state.get(p, {}), self._params[i].grad
            if g is None or "exp_avg_sq" not in st or id(p) not in group_of:
                continue
            hp = group_of[id(p)]
            t = float(st.get("step", 0))
            beta2, eps = float(hp.get("betas", (0.9, 0.999))[1]), float(hp.get("eps", 1e-8))
            if t <= 0:
                continue
            v_hat = local(st["exp_avg_sq"]).float() / (1.0 - beta2 ** t)
            g = local(g)
            vals.append((g.float().square() / v_hat.clamp_min(eps * eps)).sum())
            counts.append(float(g.numel()))
            idx.append(i)
        if vals:  # sum of g^2 / v_hat per parameter, and its elements (this process's shard)
            self._diag["g2v"] = torch.stack(vals)
            self._diag["g2v_n"] = torch.tensor(counts, device=self._diag["g2v"].device)
            self._g2v_params = idx

    # -- steps ------------------------------------------------------------------------------

    # -- forwards ---------------------------------------------------------------------------

    def _count_tokens(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        """Top-level pre-hook: tokens, batch shape, forwards per step, the padding mask."""
        if not torch.is_grad_enabled():
            return
        x = first_tensor(args, kwargs, ("input_ids", "idx"))
        if x is None:
            return
        self._forwards += 1
        mask = kwargs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.dim() == 2 and not x.is_floating_point():
            # real tokens only (a device tensor, read at the next flush)
            self._tokens_step = self._tokens_step + mask.detach().sum()
            if self.fh.armed:
                self.fh.pad = mask.detach() > 0
        elif x.is_floating_point():  # embeddings given: (B, T, C)
            self._tokens_step += x.numel() // max(1, x.shape[-1])
        else:
            self._tokens_step += x.numel()
        self.bt = (x.shape[0], x.shape[-2] if x.is_floating_point() else x.shape[-1]) \
            if x.dim() >= 2 else (1, x.shape[0])

    def _arm(self) -> None:
        """Makes the next forward a probed one (the hooks stay attached; they check ``armed``)."""
        self._diag = {}
        self.fh.armed = True

    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    # -- steps ------------------------------------------------------------------------------

    def _is_diag(self, step: int) -> bool:
        return step == 1 or step % self.interval == 0

    def step(self, loss: Any, lr: float | None = None, *, grad_norm: Any = None,
             tokens: int | None = None, val_loss: float | None = None) -> None:
        """Records one optimizer step: call it once per step, after ``optimizer.step()``.

        ``loss``: the step's training loss (a tensor is read on the host only at the next flush).
        ``lr``: the learning rate the step used (default: the optimizer's first group's, read
        before its step). ``grad_norm``: the gradient norm before clipping when you clip
        (``torch.nn.utils.clip_grad_norm_``'s result); default: the norm of the gradients the
        optimizer saw. ``tokens``: tokens of the step (default: counted from the model's
        inputs, real tokens only where an ``attention_mask`` is passed). ``val_loss``: a
        validation loss measured at this step.

        With the optimizer given to the probe, a call that comes before ``optimizer.step()``
        (inside the loss computation, say) is held and recorded when the optimizer steps, with
        that step's gradients and learning rate, and a warning says where to call it.
        """
        if self._closed:
            raise RuntimeError("normlab.torch.Probe: step() after close()")
        kw = dict(loss=loss, lr=lr, grad_norm=grad_norm, tokens=tokens, val_loss=val_loss)
        if self.optimizer is None or self._opt_steps > self._opt_steps_recorded:
            self._record(**kw)
            return
        self._warn_once("early", "normlab.torch.Probe: step() was called with no "
                        "optimizer.step() since the previous call; the probe records this loss "
                        "with the next optimizer step. Call probe.step(loss) once per optimizer "
                        "step, after optimizer.step().")
        if self._held is not None:  # twice with no optimizer step: the first is a step of its own
            held, self._held = self._held, None
            self._record(**held)
        self._held = kw

    def _record(self, loss: Any, lr: float | None, grad_norm: Any, tokens: int | None,
                val_loss: float | None) -> None:
        self._opt_steps_recorded = self._opt_steps
        self.step_count += 1
        s = self.step_count
        if self.optimizer is None:
            if not self._grads_read:
                self._grad_norms()
            self._grads_read = False
            self.micro_batches.append(self._forwards)
            self._forwards = 0
        if lr is None:
            lr = self._lr if self._lr is not None else (
                float(self.optimizer.param_groups[0]["lr"]) if self.optimizer else float("nan"))
        self.lrs.append(float(lr))
        self._norm_given = grad_norm is not None
        if is_dtensor(grad_norm):  # clip_grad_norm_ of DTensor gradients
            grad_norm = grad_norm.full_tensor()
        tok = tokens if tokens is not None else self._tokens_step
        now = time.perf_counter()
        rec = {"step": s, "loss": loss.detach() if isinstance(loss, torch.Tensor) else
               float(loss), "lr": float(lr), "_tok": tok, "_dt": now - self._t_last,
               "time_s": now - self._t0,
               # the loop's norm, or this process's sum of squares (None: no gradient read)
               "_gn": grad_norm if grad_norm is not None else None,
               "_gsq": self._gsq if grad_norm is None else None}
        if val_loss is not None:
            rec["val_loss"] = float(val_loss)
        self._t_last, self._tokens_step, self._gsq, self._lr = now, 0, None, None
        if self._diag is not None:
            fwd, missing = self.fh.harvest(self.device)
            self.fh.armed = False
            rec["_diag"] = {**self._diag, **fwd}
            rec["_missing"] = missing
            if missing:
                self._say_missing(s, missing)
            self._diag, self._before = None, None
        self._pending.append(rec)
        if "_diag" in rec:
            self.flush()
        if self._is_diag(s + 1):
            self._arm()

    def _say_missing(self, step: int, groups: list[str]) -> None:
        """Warns once and writes the `missing` event (docs/metrics.md) once per reason."""
        if self.compiled or torch.compiler.is_compiling():
            why = ("the compiled model did not run the probe's hooks (compiled with "
                   "fullgraph/export, or a graph cached before the probe attached)")
        else:
            why = ("the probe's hooks did not run during the step's forward (no forward with "
                   "gradients enabled since the previous step, or a forward that bypasses the "
                   "mapped modules)")
        reason = f"forward statistics missing from step {step} on: {why}"
        if why in self._missing_said:
            return
        self._missing_said.add(why)
        fields = [f for g in groups for f in FIELDS[g] if g != "logits" or self.r.head]
        warnings.warn(f"normlab.torch.Probe: {reason}; recorded as null: {', '.join(fields)}",
                      RuntimeWarning, stacklevel=4)
        self.writer.write({"event": "missing", "step": step, "fields": fields, "reason": reason})

    # keys of a probed step's device values summed over FSDP2's shards (process 0's under DDP)
    _SHARD_SUMS = ("grad_sub", "grad_grp", "upd_d", "upd_w", "g2v", "g2v_n")

    def flush(self) -> None:
        """Writes the pending step lines: one host transfer (and under torch.distributed one
        all_gather) for all their device values."""
        if not self._pending:
            return
        vals, where = [], []  # where: (record, key, length)

        def put(rec: dict[str, Any], key: str, v: Any) -> None:
            t = v.detach().double().reshape(-1) if isinstance(v, torch.Tensor) else \
                torch.tensor([math.nan if v is None else float(v)], dtype=torch.float64)
            where.append((rec, key, t.numel()))
            vals.append(t.to(self.device))

        for rec in self._pending:
            for key in ("loss", "_tok", "_gn", "_gsq"):
                put(rec, key, rec[key])
            for key, t in sorted(rec.get("_diag", {}).items()):
                put(rec, key, t)
        parts = self.dist.gather(torch.cat(vals))
        pos = 0
        for rec, key, n in where:
            got = [p[pos:pos + n] for p in parts]
            pos += n
            if key in ("loss", "_tok", "_gn", "_gsq"):
                rec[key] = [g[0] for g in got]
            else:
                rec.setdefault("_host", {})[key] = got
        for rec in self._pending:
            rec.pop("_diag", None)
            host, missing = rec.pop("_host", None), rec.pop("_missing", None)
            tok = sum(rec.pop("_tok"))
            self._tokens_total += int(round(tok))
            dt = rec.pop("_dt")
            loss = rec["loss"] = sum(rec["loss"]) / len(rec["loss"])
            gn, gsq = rec.pop("_gn")[0], rec.pop("_gsq")
            if gsq[0] == gsq[0]:  # read: summed over shards, process 0's when replicated
                gn = math.sqrt(max(0.0, sum(gsq) if self.dist.sharded else gsq[0]))
            rec["grad_norm"] = gn if gn == gn else None
            rec["tokens"] = self._tokens_total
            rec["tokens_per_s"] = tok / dt if dt > 0 else 0.0
            rec["ce"], rec["z_loss"] = loss, 0.0
            if host is not None:
                mine = {k: ([sum(x) for x in zip(*v)] if self.dist.sharded else v[0])
                        if k in self._SHARD_SUMS else v[0] for k, v in host.items()}
                fwd = [{k: host[k][r] for k in ("resid", "attn", "logits") if k in host}
                       for r in range(len(parts))]
                rec.update(diag_fields(self, mine, fwd, missing))
            self.writer.step_line(rec)
        self._pending.clear()

    # -- the run's end ----------------------------------------------------------------------

    def close(self, reason: str | None = None, detail: str = "") -> None:
        """Flushes, detaches every hook, rewrites config.toml with what the run showed (steps,
        peak learning rate, warmup) and writes the end event. ``reason``: "done" (default when
        the planned train.steps were reached or none was given), "interrupted" otherwise."""
        if self._closed:
            return
        if self._held is not None:  # a step() the optimizer never followed
            held, self._held = self._held, None
            self._opt_steps_recorded = -1
            self._record(**held)
        self.flush()
        self.fh.detach()
        self.fh.armed = False
        for h in self._hooks:
            h.remove()
        self._closed = True
        planned = self.user_cfg.get("train.steps")
        if reason is None:
            reason = "done" if planned is None or self.step_count >= int(planned) else "interrupted"
        self.writer.write_config(config_text(self))
        wall = time.perf_counter() - self._t0
        self.writer.end(self.step_count, reason, detail,
                        self._tokens_total / wall if wall > 0 else 0.0, wall)

    def __enter__(self) -> Probe:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self.close("interrupted", f"{exc_type.__name__}: {exc}" if exc is not None else "")

