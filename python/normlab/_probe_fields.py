"""The diagnostics fields (docs/metrics.md) of a probed step, from its host values: what
normlab.torch.Probe writes on the step's line."""
from __future__ import annotations

import math
from typing import Any

from . import _probe_stats as _st

# the parameter groups of grad_norm_group, update_ratio, update_rms and rms_g2v
GROUPS = ("embedding", "attention", "mlp", "norm", "head")


def diag_fields(probe: Any, h: dict[str, list[float]],
                parts: list[dict[str, list[float]]] | None = None) -> dict[str, Any]:
    """normlab's diagnostics fields (docs/metrics.md) of a probed step of ``probe`` from its host
    values ``h``; ``parts``: the forward statistics of every process (default: this one's)."""
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
    R, A = _st.RESID, H + _st.ATTN

    def rows(key: str, i: int, w: int) -> list[list[float]]:
        return [p[key][i * w:(i + 1) * w] for p in parts]

    resid = [_st.combine_resid(rows("resid", k, R)) for k in range(2 * L + 1)]
    out["resid_rms"] = [r[0] for r in resid]
    out["resid_max"] = [r[1] for r in resid]
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
    return out
