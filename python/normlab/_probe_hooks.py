"""The forward hooks of normlab.torch.Probe: residual stream, attention and output logits of the
probed steps, measured by hooks on the modules a family map names (_probe_maps.py).

The hooks stay attached from the probe's start to its close and do nothing unless ``armed`` (the
probed steps). That is what lets torch.compile run them: a model compiled after the probe
attached traces the hooks into its graph, and dynamo guards on ``armed``, so that a compiled
model holds two graphs, one for probed steps and one for the others, and switches between them
without recompiling or breaking the graph (tests/py/test_probe_compile.py counts both). A hook
only returns new tensors into ``acc`` (a dict, mutated in place: dynamo replays the writes after
the graph), nothing is read on the host inside a hook, and every statistic stays on the device
until the probed step ends.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from . import _probe_stats as _st
from ._probe_maps import Resolved

# The groups of forward statistics and the metrics.jsonl fields each gives (contract of the
# `missing` event, docs/metrics.md).
FIELDS = {
    "resid": ("resid_rms", "resid_max", "resid_kurtosis"),
    "attn": ("attn_max_logit", "attn_entropy", "attn_first_mass"),
    "logits": ("log_z_mean", "log_z_std", "log_z_max", "max_logit", "max_logit_raw"),
}


def first_tensor(args: tuple, kwargs: Mapping[str, Any], names: tuple[str, ...] = ()):
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


def output_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and isinstance(out[0], torch.Tensor):
        return out[0]
    for name in ("last_hidden_state", "logits"):
        if isinstance(getattr(out, name, None), torch.Tensor):
            return getattr(out, name)
    return None


class ForwardHooks:
    """The hooks of one resolved model. ``pad``: the padding mask (B, T) of the current forward
    (set by the probe's top-level hook from ``attention_mask``), or None."""

    def __init__(self, r: Resolved) -> None:
        self.r = r
        self.armed = False
        self.acc: dict[str, Any] = {}
        self.qk: dict[str, Any] = {}
        self.pad: torch.Tensor | None = None
        self.handles: list[Any] = []

    # -- attaching --------------------------------------------------------------------------

    def attach(self) -> None:
        hooks, blocks = self.handles, self.r.blocks
        hooks.append(blocks[0].module.register_forward_pre_hook(
            lambda m, a, kw: self._resid(0, first_tensor(a, kw, ("hidden_states",))),
            with_kwargs=True))
        for l, b in enumerate(blocks):
            hooks.append(b.module.register_forward_hook(
                lambda m, a, o, l=l: self._resid(2 * l + 2, output_tensor(o))))
            if b.mid_side == "input":
                hooks.append(b.mid.register_forward_pre_hook(
                    lambda m, a, kw, l=l: self._resid(2 * l + 1, first_tensor(a, kw)),
                    with_kwargs=True))
            else:
                hooks.append(b.mid.register_forward_hook(
                    lambda m, a, o, l=l: self._resid(2 * l + 1, output_tensor(o))))
            hooks.append(b.attn.register_forward_pre_hook(
                lambda m, a, kw, l=l: self._attn_enter(l, a, kw), with_kwargs=True))
            hooks.append(b.attn.register_forward_hook(lambda m, a, o, l=l: self._attn_exit(l)))
            if self.r.spec.qk_layout != "mha":
                hooks.append(b.q.register_forward_hook(lambda m, a, o: self._keep("q", o)))
                if b.k is not None:
                    hooks.append(b.k.register_forward_hook(lambda m, a, o: self._keep("k", o)))
        if self.r.head is not None:
            hooks.append(self.r.head.register_forward_hook(lambda m, a, o: self._logits(o)))

    def detach(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles.clear()
        self.qk.clear()
        self.acc.clear()

    def _live(self) -> bool:
        return self.armed and torch.is_grad_enabled()

    # -- hooks ------------------------------------------------------------------------------

    def _keep(self, name: str, out: Any) -> None:
        if self._live():
            self.qk[name] = output_tensor(out)

    def _resid(self, k: int, x: torch.Tensor | None) -> None:
        # Activation checkpointing recomputes a block in the backward pass: the hook fires again
        # with the same tensors and writes the same values (counted once).
        if x is not None and self._live():
            self.acc[f"r{k}"] = _st.residual_stats(x, self.pad)

    def _logits(self, out: Any) -> None:
        z = output_tensor(out)
        if z is not None and self._live():
            self.acc["z"] = _st.logit_stats(z, self.r.final_softcap, self.pad)

    def _attn_enter(self, l: int, args: tuple, kwargs: dict) -> None:
        if not self._live():
            return
        self.qk.clear()
        self.qk["pos"] = kwargs.get("position_embeddings")
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
        if not self._live() or self.r.spec.qk_layout == "mha" or "q" not in self.qk:
            return
        with torch.no_grad():
            q, k = self.qk["q"], self.qk.get("k")
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
                pos = self.qk.get("pos")
                if pos is None:
                    raise RuntimeError("normlab.torch: the attention module of layer "
                                       f"{l} got no position_embeddings (cos, sin) to apply RoPE")
                cos, sin = pos
                q, k = _st.rope_rotate_half(q, cos, sin), _st.rope_rotate_half(k, cos, sin)
            ok = _st.allowed_keys(T, self.r.causal, self.r.windows[l], q.device)
            assert k.shape[1] == Hkv, f"layer {l}: {k.shape[1]} key heads, expected {Hkv}"
            self._attn_into(l, q, k, ok)
        self.qk.clear()

    def _attn_into(self, l: int, q: torch.Tensor, k: torch.Tensor, ok: torch.Tensor) -> None:
        heads, vec = _st.attention_stats(q, k, self.r.scales[l], self.r.attn_softcap, ok,
                                         self.pad)
        self.acc[f"a{l}"] = torch.cat([heads, vec])

    # -- the probed step's end --------------------------------------------------------------

    def harvest(self, device: torch.device) -> tuple[dict[str, torch.Tensor], list[str]]:
        """The probed step's statistics as device tensors ("resid" (2L+1, resid_width(d_model)), "attn"
        (L, H + ATTN), "logits" (LOGITS,)), NaN where a hook did not fire, and the groups of
        FIELDS with a value missing. Empties ``acc`` for the next probed step."""
        L, H = len(self.r.blocks), self.r.n_head
        acc, nan = self.acc, float("nan")
        missing = []

        def rows(keys: list[str], width: int, group: str) -> torch.Tensor:
            if any(k not in acc for k in keys):
                missing.append(group)
            return torch.stack([acc[k].to(device).float() if k in acc else
                                torch.full((width,), nan, device=device) for k in keys])

        out = {"resid": rows([f"r{k}" for k in range(2 * L + 1)],
                             _st.resid_width(self.r.d_model), "resid"),
               "attn": rows([f"a{l}" for l in range(L)], H + _st.ATTN, "attn")}
        if self.r.head is not None:
            out["logits"] = rows(["z"], _st.LOGITS, "logits")[0]
        acc.clear()
        self.qk.clear()
        self.pad = None
        return out, missing
