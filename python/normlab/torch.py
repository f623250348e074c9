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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from . import _probe_stats as _st
from ._config import Config
from ._probe_maps import FAMILIES, Resolved, resolve
from ._probe_run import RunWriter

__all__ = ["Probe", "FAMILIES"]

_GROUPS = ("embedding", "attention", "mlp", "norm", "head")
# PyTorch optimizer classes (torch.optim, torch-optimi, adam-atan2-pytorch) -> normlab's optim.name
_OPTIMIZER_NAMES = {"AdamW": "adamw", "Muon": "muon", "StableAdamW": "stable_adamw",
                    "AdamAtan2": "adam_atan2"}


def _first_tensor(args: tuple, kwargs: Mapping[str, Any], names: tuple[str, ...] = ()):
    for n in names:
        if isinstance(kwargs.get(n), torch.Tensor):
            return kwargs[n]
    for a in args:
        if isinstance(a, torch.Tensor):
            return a
    for a in kwargs.values():
        if isinstance(a, torch.Tensor):
            return a
    return None


def _output_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    for name in ("last_hidden_state", "logits"):
        if isinstance(getattr(out, name, None), torch.Tensor):
            return getattr(out, name)
    return None


def _flat(cfg: Mapping[str, Any] | None) -> dict[str, Any]:
    """{"optim": {"lr": 1}} or {"optim.lr": 1} as {"optim.lr": 1}."""
    out: dict[str, Any] = {}
    for k, v in (cfg or {}).items():
        if isinstance(v, Mapping):
            out.update({f"{k}.{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


class Probe:
    """Hooks a PyTorch model (and its optimizer) and writes a normlab run directory.

    ``interval``: the diagnostics interval (normlab's ``diag.interval``): step 1 and every
    interval-th step are probed. ``config``: normlab config keys that override or complete what
    the probe tells of the model and optimizer (``{"optim.grad_clip": 1.0, "train.steps": 5000,
    "data.path": "my_text.txt"}``); ``per_head``: per-head attention logits; ``map``: the module
    map of a model no family record knows (docs/python.md); ``update_ratios=False`` spares the
    copy of the weights a probed step otherwise takes. A model that cannot be mapped raises
    ``ValueError`` naming what is missing.
    """

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
                 out: str = "runs/probe", interval: int = 25,
                 config: Mapping[str, Any] | None = None, *, per_head: bool = False,
                 update_ratios: bool = True,
                 map: Mapping[str, Any] | None = None) -> None:  # noqa: A002
        if interval < 1:
            raise ValueError(f"normlab.torch.Probe: interval must be >= 1, got {interval}")
        self.model, self.optimizer = model, optimizer
        self.interval, self.per_head = int(interval), bool(per_head)
        self.update_ratios = bool(update_ratios)
        self.r: Resolved = resolve(model, dict(map) if map is not None else None)
        self.notes = list(self.r.notes)
        self._user_cfg = _flat(config)
        for key in ("data.path", "data.tokenizer"):  # relative to this process's directory
            v = self._user_cfg.get(key)
            if isinstance(v, (str, os.PathLike)) and str(v) and os.path.exists(v):
                self._user_cfg[key] = os.path.abspath(v)
        p0 = next((p for _, p, *_ in self.r.params), None)
        self.device = p0.device if p0 is not None else torch.device("cpu")
        self._index_params()
        self.out = Path(out)
        self.step_count = 0
        self._t0 = time.perf_counter()
        self._t_last, self._tokens_total = self._t0, 0
        self._tokens_step, self._bt = 0, (0, 0)
        self._pending: list[dict[str, Any]] = []
        self._lrs: list[float] = []
        self._lr: float | None = None
        self._gnorm: torch.Tensor | None = None
        self._diag: dict[str, torch.Tensor] | None = None
        self._before: list[torch.Tensor] | None = None
        self._diag_hooks: list[Any] = []
        self._qk: dict[str, Any] = {}
        self._closed = False
        self._norm_given = False  # the last step() had grad_norm=
        config_text = self._config_text()  # a ConfigError before anything is written or hooked
        self.writer = RunWriter(self.out)
        self.writer.write_config(config_text)
        self._hooks = [model.register_forward_pre_hook(self._count_tokens, with_kwargs=True)]
        if optimizer is not None:
            self._hooks.append(optimizer.register_step_pre_hook(self._before_update))
            self._hooks.append(optimizer.register_step_post_hook(self._after_update))
        if self._is_diag(1):
            self._arm()

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
        return [self._params[i].grad for i in idx], idx

    def _grad_norms(self) -> None:
        """The global gradient norm (every step) and, on a probed step, the squared norms per
        sublayer and group, all on the device."""
        grads, idx = self._grads()
        if not grads:
            self._gnorm = torch.zeros((), device=self.device)
            return
        sq = torch.stack([n.float() for n in torch._foreach_norm(grads)]).square()
        self._gnorm = sq.sum().sqrt()
        if self._diag is not None:
            L = len(self.r.blocks)
            i = torch.tensor(idx, dtype=torch.long)
            d = self._diag
            d["grad_sub"] = torch.zeros(2 * L + 1, device=sq.device).index_add_(
                0, self._sub_of[i].to(sq.device), sq)
            d["grad_grp"] = torch.zeros(len(_GROUPS), device=sq.device).index_add_(
                0, self._grp_of[i].to(sq.device), sq)

    def _before_update(self, opt: Any, args: Any, kwargs: Any) -> None:
        lr = opt.param_groups[0]["lr"]
        self._lr = float(lr)
        # The global norm of every step, unless the loop passes its own (grad_norm=): then only
        # probed steps read the gradients.
        if self._diag is not None or not self._norm_given:
            self._grad_norms()
        if self._diag is not None:
            if self.update_ratios:  # a copy of the weights, for the probed step only
                self._before = [p.detach().clone() for p in self._params]

    @torch.no_grad()
    def _after_update(self, opt: Any, args: Any, kwargs: Any) -> None:
        if self._diag is None:
            return
        self._second_moment(opt)
        if self._before is None:  # update_ratios=False
            return
        wn = torch._foreach_norm(self._before)
        torch._foreach_sub_(self._before, [p.detach() for p in self._params])  # before - after
        dn = torch._foreach_norm(self._before)
        self._before = None
        grp = self._grp_of.to(self.device)
        zeros = torch.zeros(len(_GROUPS), device=self.device)
        self._diag["upd_d"] = zeros.index_add(0, grp, torch.stack(dn).float().square())
        self._diag["upd_w"] = zeros.index_add(0, grp, torch.stack(wn).float().square())

    @torch.no_grad()
    def _second_moment(self, opt: Any) -> None:
        """rms_g2v: per parameter RMS(g^2 / max(v_hat, eps^2)) after the update, for optimizers
        that keep Adam's second moment as state["exp_avg_sq"] (Adam, AdamW and their kin), with
        v_hat = v / (1 - beta2^t), g the gradient the update used."""
        group_of = {id(p): g for g in opt.param_groups for p in g["params"]}
        idx, vals = [], []
        for i, p in enumerate(self._params):
            st, g = opt.state.get(p, {}), self._params[i].grad
            if g is None or "exp_avg_sq" not in st or id(p) not in group_of:
                continue
            hp = group_of[id(p)]
            t = float(st.get("step", 0))
            beta2, eps = float(hp.get("betas", (0.9, 0.999))[1]), float(hp.get("eps", 1e-8))
            if t <= 0:
                continue
            v_hat = st["exp_avg_sq"].float() / (1.0 - beta2 ** t)
            vals.append((g.float().square() / v_hat.clamp_min(eps * eps)).mean())
            idx.append(i)
        if vals:
            self._diag["g2v"] = torch.stack(vals)  # mean of g^2 / v_hat per parameter
            self._g2v_params = idx

    # -- forward hooks (probed steps only) ----------------------------------------------------

    def _count_tokens(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        if not torch.is_grad_enabled():
            return
        x = _first_tensor(args, kwargs, ("input_ids", "idx"))
        if x is None:
            return
        if x.is_floating_point():  # embeddings given: (B, T, C)
            self._tokens_step += x.numel() // max(1, x.shape[-1])
            self._bt = tuple(x.shape[:2])
        else:
            self._tokens_step += x.numel()
            self._bt = (x.shape[0], x.shape[-1]) if x.dim() >= 2 else (1, x.shape[0])

    def _arm(self) -> None:
        """Allocates the probed step's device buffers and attaches the forward hooks."""
        L, H, dev = len(self.r.blocks), self.r.n_head, self.device
        nan = float("nan")
        self._diag = {"resid": torch.full((2 * L + 1, 2), nan, device=dev),
                      "attn_head": torch.full((L, H), nan, device=dev),
                      "attn_ent": torch.full((L,), nan, device=dev),
                      "attn_first": torch.full((L,), nan, device=dev),
                      "logits": torch.full((5,), nan, device=dev)}
        hooks = self._diag_hooks
        blocks = self.r.blocks
        hooks.append(blocks[0].module.register_forward_pre_hook(
            lambda m, a, kw: self._resid(0, _first_tensor(a, kw, ("hidden_states",))),
            with_kwargs=True))
        for l, b in enumerate(blocks):
            hooks.append(b.module.register_forward_hook(
                lambda m, a, o, l=l: self._resid(2 * l + 2, _output_tensor(o))))
            if b.mid_side == "input":
                hooks.append(b.mid.register_forward_pre_hook(
                    lambda m, a, kw, l=l: self._resid(2 * l + 1, _first_tensor(a, kw)),
                    with_kwargs=True))
            else:
                hooks.append(b.mid.register_forward_hook(
                    lambda m, a, o, l=l: self._resid(2 * l + 1, _output_tensor(o))))
            hooks.append(b.attn.register_forward_pre_hook(
                lambda m, a, kw, l=l: self._attn_enter(l, a, kw), with_kwargs=True))
            hooks.append(b.attn.register_forward_hook(lambda m, a, o, l=l: self._attn_exit(l)))
            if self.r.spec.qk_layout != "mha":
                hooks.append(b.q.register_forward_hook(
                    lambda m, a, o: self._qk.__setitem__("q", _output_tensor(o))))
                if b.k is not None:
                    hooks.append(b.k.register_forward_hook(
                        lambda m, a, o: self._qk.__setitem__("k", _output_tensor(o))))
        if self.r.head is not None:
            hooks.append(self.r.head.register_forward_hook(lambda m, a, o: self._logits(o)))

    def _disarm(self) -> None:
        for h in self._diag_hooks:
            h.remove()
        self._diag_hooks.clear()
        self._qk.clear()

    def _resid(self, k: int, x: torch.Tensor | None) -> None:
        if x is not None and torch.is_grad_enabled():
            _st.residual_stats(x, self._diag["resid"][k])

    def _logits(self, out: Any) -> None:
        z = _output_tensor(out)
        if z is not None and torch.is_grad_enabled():
            _st.logit_stats(z, self.r.final_softcap, self._diag["logits"])

    def _attn_enter(self, l: int, args: tuple, kwargs: dict) -> None:
        self._qk.clear()
        if not torch.is_grad_enabled():
            return
        self._qk["pos"] = kwargs.get("position_embeddings")
        if self.r.spec.qk_layout == "mha":  # nn.MultiheadAttention(query, key, value, ...)
            self._mha_stats(l, args, kwargs)

    @torch.no_grad()
    def _mha_stats(self, l: int, args: tuple, kwargs: dict) -> None:
        mha = self.r.blocks[l].attn
        query = args[0] if args else kwargs["query"]
        key = args[1] if len(args) > 1 else kwargs.get("key", query)
        if not mha.batch_first:
            query, key = query.transpose(0, 1), key.transpose(0, 1)
        E, H = mha.embed_dim, self.r.n_head
        w, b = mha.in_proj_weight, mha.in_proj_bias
        q = nn.functional.linear(query, w[:E], None if b is None else b[:E])
        k = nn.functional.linear(key, w[E:2 * E], None if b is None else b[E:2 * E])
        B, T = q.shape[:2]
        q = q.view(B, T, H, -1).transpose(1, 2)
        k = k.view(B, T, H, -1).transpose(1, 2)
        mask = kwargs.get("attn_mask", args[4] if len(args) > 4 else None)
        causal = bool(kwargs.get("is_causal", False))
        ok = _st.allowed_keys(T, causal, 0, q.device, None if causal else mask)
        self._attn_into(l, q, k, ok)

    def _attn_exit(self, l: int) -> None:
        if not torch.is_grad_enabled() or self.r.spec.qk_layout == "mha" or "q" not in self._qk:
            return
        with torch.no_grad():
            q, k = self._qk["q"], self._qk.get("k")
            H, Hkv, D = self.r.n_head, self.r.n_kv_head, self.r.head_dim
            lay = self.r.spec.qk_layout
            if lay == "fused":
                q, k = q[..., : H * D], q[..., H * D: 2 * H * D]
            B, T = (q.shape[0], q.shape[2]) if lay == "bhtd" else q.shape[:2]
            if lay in ("flat", "fused"):
                q = q.reshape(B, T, H, D).transpose(1, 2)
                k = k.reshape(B, T, -1, D).transpose(1, 2)
            elif lay == "bthd":
                q, k = q.transpose(1, 2), k.transpose(1, 2)
            if self.r.spec.rope == "kwargs":
                pos = self._qk.get("pos")
                if pos is None:
                    raise RuntimeError("normlab.torch: the attention module of layer "
                                       f"{l} got no position_embeddings (cos, sin) to apply RoPE")
                cos, sin = pos
                q, k = _st.rope_rotate_half(q, cos, sin), _st.rope_rotate_half(k, cos, sin)
            ok = _st.allowed_keys(T, self.r.causal, self.r.windows[l], q.device)
            assert k.shape[1] == Hkv, f"layer {l}: {k.shape[1]} key heads, expected {Hkv}"
            self._attn_into(l, q, k, ok)
        self._qk.clear()

    def _attn_into(self, l: int, q: torch.Tensor, k: torch.Tensor, ok: torch.Tensor) -> None:
        d = self._diag
        _st.attention_stats(q, k, self.r.scales[l], self.r.attn_softcap, ok, d["attn_head"][l],
                            d["attn_ent"][l], d["attn_first"][l])

    # -- steps ------------------------------------------------------------------------------

    def _is_diag(self, step: int) -> bool:
        return step == 1 or step % self.interval == 0

    def step(self, loss: Any, lr: float | None = None, *, grad_norm: Any = None,
             tokens: int | None = None, val_loss: float | None = None) -> None:
        """Records one optimizer step (call it once per step, after ``optimizer.step()``).

        ``loss``: the step's training loss (a tensor is read on the host only at the next flush).
        ``lr``: the learning rate the step used (default: the optimizer's first group's, read
        before its step). ``grad_norm``: the gradient norm before clipping when you clip
        (``torch.nn.utils.clip_grad_norm_``'s result); default: the norm of the gradients the
        optimizer saw. ``tokens``: tokens of the step (default: counted from the model's
        inputs). ``val_loss``: a validation loss measured at this step.
        """
        if self._closed:
            raise RuntimeError("normlab.torch.Probe: step() after close()")
        self.step_count += 1
        s = self.step_count
        if self.optimizer is None:
            self._grad_norms()
        if lr is None:
            lr = self._lr if self._lr is not None else (
                float(self.optimizer.param_groups[0]["lr"]) if self.optimizer else float("nan"))
        self._lrs.append(float(lr))
        self._norm_given = grad_norm is not None
        gn = grad_norm if grad_norm is not None else self._gnorm
        tok = int(tokens) if tokens is not None else self._tokens_step
        self._tokens_total += tok
        now = time.perf_counter()
        rec = {"step": s, "tokens": self._tokens_total, "loss": loss.detach() if isinstance(
            loss, torch.Tensor) else float(loss), "lr": float(lr),
            "grad_norm": gn.detach() if isinstance(gn, torch.Tensor) else
            (float(gn) if gn is not None else float("nan")),
            "tokens_per_s": tok / (now - self._t_last) if now > self._t_last else 0.0,
            "time_s": now - self._t0}
        if val_loss is not None:
            rec["val_loss"] = float(val_loss)
        self._t_last, self._tokens_step, self._gnorm, self._lr = now, 0, None, None
        if self._diag is not None:
            rec["_diag"] = self._diag
            self._diag, self._before = None, None
            self._disarm()
        self._pending.append(rec)
        if "_diag" in rec:
            self.flush()
        if self._is_diag(s + 1):
            self._arm()

    def flush(self) -> None:
        """Writes the pending step lines (one host transfer for all their device values)."""
        if not self._pending:
            return
        vals, where = [], []
        for rec in self._pending:
            for key in ("loss", "grad_norm"):
                if isinstance(rec[key], torch.Tensor):
                    where.append((rec, key, None))
                    vals.append(rec[key].float().reshape(1))
            for key, t in rec.get("_diag", {}).items():
                where.append((rec, key, t.shape))
                vals.append(t.float().reshape(-1))
        host = torch.cat([v.to(self.device) for v in vals]).tolist() if vals else []
        pos = 0
        for rec, key, shape in where:
            n = 1 if shape is None else math.prod(shape)
            chunk = host[pos:pos + n]
            pos += n
            if shape is None:
                rec[key] = chunk[0]
            else:
                rec.setdefault("_host", {})[key] = chunk
        for rec in self._pending:
            rec.pop("_diag", None)
            host_diag = rec.pop("_host", None)
            rec["ce"], rec["z_loss"] = rec["loss"], 0.0
            if host_diag is not None:
                rec.update(self._diag_fields(host_diag))
            self.writer.step_line(rec)
        self._pending.clear()

    def _diag_fields(self, h: dict[str, list[float]]) -> dict[str, Any]:
        """normlab's diagnostics fields (docs/metrics.md) from a probed step's host values."""
        L, H = len(self.r.blocks), self.r.n_head
        out: dict[str, Any] = {}
        if "grad_sub" in h:
            g = h["grad_sub"]
            out["grad_norm_block"] = [math.sqrt(g[l] + g[L + l]) for l in range(L)]
            out["grad_norm_attn"] = [math.sqrt(g[l]) for l in range(L)]
            out["grad_norm_mlp"] = [math.sqrt(g[L + l]) for l in range(L)]
            out["grad_norm_group"] = {_GROUPS[i]: math.sqrt(h["grad_grp"][i])
                                      for i in self._groups_present}
        r = h["resid"]
        out["resid_rms"] = r[0::2]
        out["resid_max"] = r[1::2]
        heads = [h["attn_head"][l * H:(l + 1) * H] for l in range(L)]
        out["attn_max_logit"] = [max(row) if all(map(math.isfinite, row)) else float("nan")
                                 for row in heads]
        out["attn_entropy"] = h["attn_ent"]
        out["attn_first_mass"] = h["attn_first"]
        if self.per_head:
            out["attn_max_logit_head"] = heads
        if self.r.head is not None:
            z = h["logits"]
            out.update(log_z_mean=z[0], log_z_std=z[1], log_z_max=z[2], max_logit=z[3],
                       max_logit_raw=z[4])
        if "upd_d" in h:
            out["update_ratio"] = {
                _GROUPS[i]: math.sqrt(h["upd_d"][i] / h["upd_w"][i]) if h["upd_w"][i] > 0 else 0.0
                for i in self._groups_present}
            out["update_rms"] = {_GROUPS[i]: math.sqrt(h["upd_d"][i] / self._grp_numel[i])
                                 for i in self._groups_present}
        if "g2v" in h:  # per parameter mean(g^2 / v_hat): RMS per group over the elements
            acc: dict[int, list[float]] = {}
            for i, m in zip(self._g2v_params, h["g2v"]):
                a = acc.setdefault(self.r.params[i][4], [0.0, 0.0])
                a[0] += m * self._params[i].numel()
                a[1] += self._params[i].numel()
            out["rms_g2v"] = {g: math.sqrt(a[0] / a[1]) for g, a in acc.items()}
            worst = max(range(len(h["g2v"])), key=lambda j: h["g2v"][j])
            out["rms_g2v_max"] = math.sqrt(h["g2v"][worst])
            out["rms_g2v_max_tensor"] = self.r.params[self._g2v_params[worst]][0]
        return out

    # -- the run's end ----------------------------------------------------------------------

    def close(self, reason: str | None = None, detail: str = "") -> None:
        """Flushes, detaches every hook, rewrites config.toml with what the run showed (steps,
        peak learning rate, warmup) and writes the end event. ``reason``: "done" (default when
        the planned train.steps were reached or none was given), "interrupted" otherwise."""
        if self._closed:
            return
        self.flush()
        self._disarm()
        for h in self._hooks:
            h.remove()
        self._closed = True
        planned = self._user_cfg.get("train.steps")
        if reason is None:
            reason = "done" if planned is None or self.step_count >= int(planned) else "interrupted"
        self._write_config()
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

    # -- config.toml ------------------------------------------------------------------------

    def _inferred(self) -> dict[str, Any]:
        """normlab config keys for what the probe can tell of the model and optimizer."""
        r, spec, cfg = self.r, self.r.spec, getattr(self.model, "config", None)
        c: dict[str, Any] = {
            "model.n_layer": len(r.blocks), "model.d_model": r.d_model, "model.n_head": r.n_head,
            "model.placement": spec.placement, "model.norm": spec.norm,
            "model.mlp": spec.mlp if spec.mlp in ("gelu", "gelu_tanh", "swiglu", "geglu") else "gelu",
            "model.qk_norm": spec.qk_norm, "model.qk_norm_scope": spec.qk_norm_scope,
            "model.attn_softcap": r.attn_softcap, "model.final_softcap": r.final_softcap,
            "model.pos": "rope" if spec.rope else "learned",
            "diag.interval": self.interval, "diag.per_head": self.per_head,
            "train.log_interval": 1, "train.spike_policy": "off", "train.eval_interval": 0,
            "train.steps": max(1, self.step_count), "optim.grad_clip": 0.0,
            # The data is the user's: a path normlab cannot read, so that doctor lists the
            # unigram plateau as unchecked (config={"data.path": ...} names readable data).
            "data.path": str(self.out / "(data of the PyTorch run: not recorded)")}
        if r.vocab_size:
            c["model.vocab_size"] = r.vocab_size
        if r.n_kv_head != r.n_head:
            c["model.n_kv_head"] = r.n_kv_head
        if r.head_dim * r.n_head != r.d_model:
            c["model.head_dim"] = r.head_dim
        if r.head_dim and abs(r.scales[0] - r.head_dim ** -0.5) > 1e-12 * r.scales[0]:
            c["model.attn_scale"] = r.scales[0]
        d_ff = getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None)
        if d_ff is None:
            lin = getattr(r.blocks[0].module, "linear1", None)
            d_ff = lin.out_features if lin is not None else 4 * r.d_model
        c["model.d_ff"] = int(d_ff)
        if r.head is not None and getattr(r.head, "weight", None) is not None:
            emb = [m for n, m in self.model.named_modules() if n in spec.embed]
            c["model.tie_embeddings"] = any(getattr(e, "weight", None) is r.head.weight for e in emb)
        if any(r.windows):
            c["model.sliding_window"] = max(r.windows)
            c["model.layer_pattern"] = ",".join("sliding" if w else "global" for w in r.windows)
        if r.family.startswith("gemma"):  # (1 + w) norm gains, embeddings times sqrt(d_model)
            c["model.norm_gain_offset"], c["model.embed_scale"] = 1.0, math.sqrt(r.d_model)
        eps = getattr(cfg, "rms_norm_eps", None) or getattr(cfg, "layer_norm_epsilon", None)
        if eps:
            c["model.norm_eps"] = float(eps)
        c["model.bias"] = any(n.endswith(".bias") and g != "norm" for n, _, _, _, g in r.params)
        if spec.rope and getattr(cfg, "rope_theta", None):
            c["model.rope_theta"] = float(cfg.rope_theta)
        if self._bt[0]:
            c["train.batch_size"], c["model.seq_len"] = int(self._bt[0]), int(self._bt[1])
        elif getattr(cfg, "max_position_embeddings", None):
            c["model.seq_len"] = int(cfg.max_position_embeddings)
        if self.optimizer is not None:
            kind = _OPTIMIZER_NAMES.get(type(self.optimizer).__name__)
            if kind:
                c["optim.name"] = kind
            g = self.optimizer.param_groups[0]
            if "betas" in g:
                c["optim.beta1"], c["optim.beta2"] = float(g["betas"][0]), float(g["betas"][1])
            if "eps" in g:
                c["optim.eps"] = float(g["eps"])
            c["optim.weight_decay"] = max(float(x.get("weight_decay", 0.0))
                                          for x in self.optimizer.param_groups)
            if float(g["lr"]) > 0:
                c["optim.lr"] = float(g["lr"])
        if self._lrs and max(self._lrs) > 0:
            peak = max(self._lrs)
            c["optim.lr"] = peak
            c["optim.warmup_steps"] = self._lrs.index(peak) + 1 if self._lrs[0] < peak else 0
            c["optim.schedule"] = "constant" if min(self._lrs) == peak else "cosine"
        return c

    def _config_text(self) -> str:
        keys = {**self._inferred(), **self._user_cfg}
        text = Config(keys).to_toml()
        head = (f"# Written by normlab.torch.Probe for a PyTorch {type(self.model).__name__} "
                f"({self.r.family} map): the model and optimizer as far as the probe could tell.\n")
        return head + "".join(f"# note: {n}\n" for n in self.notes) + text

    def _write_config(self) -> None:
        self.writer.write_config(self._config_text())
