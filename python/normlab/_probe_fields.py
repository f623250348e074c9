"""The diagnostics fields (docs/metrics.md) of a probed step, from its host values: what
normlab.torch.Probe writes on the step's line."""
from __future__ import annotations

import math
from typing import Any

from . import _probe_stats as _st

# the parameter groups of grad_norm_group, update_ratio, update_rms and rms_g2v
GROUPS = ("embedding", "attention", "mlp", "norm", "head")


def _sublayer_names(probe: Any) -> list[str]:
    """Where each residual boundary's value comes from, in forward order: the embedding, then per
    block its attention and its MLP sublayer ("block 0 attention (model.layers.0.self_attn)")."""
    path = {m: n for n, m in probe.inner.named_modules()}
    out = ["embedding"]
    for l, b in enumerate(probe.r.blocks):
        out += [f"block {l} attention ({path.get(b.attn, '?')})",
                f"block {l} MLP ({path.get(b.module, '?')})"]
    return out


def _nonfinite(v: Any) -> bool:
    return not math.isfinite(v)


def first_nonfinite(probe: Any, h: dict[str, list[float]], out: dict[str, Any],
                    missing: list[str]) -> dict[str, str]:
    """The first sublayer whose output was not finite in the forward pass (the residual stream
    after it; the output head's logits after the last block), and the first whose parameters'
    gradient was not finite in the backward pass (from the output down): the
    nonfinite_forward / nonfinite_backward fields, present only on a probed step that had one."""
    found: dict[str, str] = {}
    if "resid" not in missing:  # a statistic that is missing is not a non-finite one
        bad = [k for k, (rms, mx) in enumerate(zip(out["resid_rms"], out["resid_max"]))
               if _nonfinite(rms) or _nonfinite(mx)]
        if bad:  # the module names only for a step that needs them
            found["nonfinite_forward"] = _sublayer_names(probe)[bad[0]]
        elif "logits" not in missing and probe.r.head is not None and (
                _nonfinite(out["log_z_mean"]) or _nonfinite(out["max_logit_raw"])):
            found["nonfinite_forward"] = "output head"
    if "grad_sub" in h:
        L, g = len(probe.r.blocks), h["grad_sub"]
        grp = {GROUPS[i]: h["grad_grp"][i] for i in probe._groups_present}
        # The backward reaches the head, then the final norm, then the blocks from the top; the
        # parameters outside the blocks share one norm (the embedding's, reached last, with
        # them: a non-finite one there is named before the blocks).
        order = [("output head", grp["head"])] if "head" in grp else []
        order.append(("outside the blocks (final norm, embedding)" if "head" in grp else
                      "outside the blocks (tied head, final norm, embedding)", g[2 * L]))
        for l in reversed(range(L)):
            order += [(f"block {l} MLP", g[L + l]), (f"block {l} attention", g[l])]
        bad_g = [name for name, v in order if _nonfinite(v)]
        if bad_g:
            found["nonfinite_backward"] = bad_g[0]
    return found


def diag_fields(probe: Any, h: dict[str, list[float]],
                parts: list[dict[str, list[float]]] | None = None,
                missing: list[str] | None = None) -> dict[str, Any]:
    """normlab's diagnostics fields (docs/metrics.md) of a probed step of ``probe`` from its host
    values ``h``; ``parts``: the forward statistics of every process (default: this one's);
    ``missing``: the groups of forward statistics whose hooks did not run."""
    L, H = len(probe.r.blocks), probe.r.n_head
    parts = parts or [h]
    out: dict[str, Any] = {}
    if "grad_sub" in h:
        g = h["grad_sub"]
        out["grad_norm_block"] = [math.sqrt(g[l] + g[L + l]) for l in range(L)]
        out["grad_norm_attn"] = [math.sqrt(g[l]) for l in range(L)]
        out["grad_norm_mlp"] = [math.sqrt(g[L + l]) for l in range(L)]
        out["grad_norm_group"] = {GROUPS[i]: math.sqrt(h["grad_grp"][i])
                                  for i in probe._groups_present}
    R, A = _st.resid_width(probe.r.d_model), H + _st.ATTN

    def rows(key: str, i: int, w: int) -> list[list[float]]:
        return [p[key][i * w:(i + 1) * w] for p in parts]

    resid = [_st.combine_resid(rows("resid", k, R)) for k in range(2 * L + 1)]
    out["resid_rms"] = [r[0] for r in resid]
    out["resid_max"] = [r[1] for r in resid]
    out["resid_kurtosis"] = [r[2] for r in resid]
    attn = [rows("attn", l, A) for l in range(L)]
    heads = [[max(r[j] for r in a) for j in range(H)] for a in attn]
    stats = [_st.combine_attn([r[H:] for r in a]) for a in attn]
    out["attn_max_logit"] = [max(row) if all(map(math.isfinite, row)) else float("nan")
                             for row in heads]
    out["attn_entropy"] = [e for e, _ in stats]
    out["attn_first_mass"] = [f for _, f in stats]
    if probe.per_head:
        out["attn_max_logit_head"] = heads
    if probe.r.head is not None:
        z = _st.combine_logits([p["logits"] for p in parts])
        out.update(log_z_mean=z[0], log_z_std=z[1], log_z_max=z[2], max_logit=z[3],
                   max_logit_raw=z[4])
    if "upd_d" in h:
        out["update_ratio"] = {
            GROUPS[i]: math.sqrt(h["upd_d"][i] / h["upd_w"][i]) if h["upd_w"][i] > 0 else 0.0
            for i in probe._groups_present}
        out["update_rms"] = {GROUPS[i]: math.sqrt(h["upd_d"][i] / probe._grp_numel[i])
                             for i in probe._groups_present}
    if "g2v" in h:  # per parameter sum of g^2 / v_hat: RMS per group over the elements
        acc: dict[int, list[float]] = {}
        for i, m, n in zip(probe._g2v_params, h["g2v"], h["g2v_n"]):
            a = acc.setdefault(probe.r.params[i][4], [0.0, 0.0])
            a[0] += m
            a[1] += n
        out["rms_g2v"] = {g: math.sqrt(a[0] / a[1]) for g, a in acc.items() if a[1] > 0}
        mean = [m / n if n > 0 else -1.0 for m, n in zip(h["g2v"], h["g2v_n"])]
        worst = max(range(len(mean)), key=lambda j: mean[j])
        out["rms_g2v_max"] = math.sqrt(mean[worst])
        out["rms_g2v_max_tensor"] = probe.r.params[probe._g2v_params[worst]][0]
    out.update(first_nonfinite(probe, h, out, missing or []))
    return out
