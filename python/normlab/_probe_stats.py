"""The statistics of normlab.torch.Probe, computed on the model's device from hooked tensors, with
normlab's definitions (src/diag/diagnostics.h, src/model/transformer.cpp, src/ops/attention.h):

- residual stream at a boundary: RMS = sqrt(sum x^2 / (B T C)), max = max |x|;
- attention of a layer, from its queries q (B, H, T, D) and keys k (B, Hkv, T, D) after RoPE and
  QK-Norm: scores s = scale q k^T over the keys each query sees (causal, and the sliding window),
  max |s| before the soft-cap (per head: over the batch and rows), and the mean over batch, heads
  and rows of the entropy of softmax(cap(s)), a row's entropy being lse - sum_j P_j cap(s)_j, and
  the mean probability on key 0 over batch, heads and rows 1 .. T-1 (attn_first_mass);
- output logits z (raw, before the final soft-cap) and log Z = logsumexp(cap(z)) per position:
  mean, population standard deviation and max of log Z, max |cap(z)|, max |z|.

Each function is pure (it returns new tensors, so that a compiled graph can run it: torch.compile
traces the probe's hooks into the model's graph) and returns its statistics in a reducible form:
sums with their counts and maxima, so that the values of several processes (DDP, FSDP2) or
micro-batches combine exactly (`combine_*` below, on the host). With a padding mask m (B, T)
(True: a real token), only real tokens count: as rows, as keys and in the residual stream.
Everything is computed in float32 whatever the model's dtype (autocast included).
"""
from __future__ import annotations

import math

import torch

# Scores materialised at once: heads are processed in chunks of at most this many elements of
# (B, heads, T, T), so that a probed step needs O(B T^2) extra memory whatever the head count.
SCORE_CHUNK = 1 << 24

# Layouts of the reducible vectors (float32 on the device):
RESID = 3    # [mean of x^2 over the real tokens' elements, max |x|, real tokens], then per
#              channel j the mean of x_j^2 over the real tokens (C values: resid_width(C) in all)
ATTN = 4     # [sum of row entropies, rows, sum of P(key 0) over rows 1.., those rows]
LOGITS = 6   # [sum of log Z, sum of (log Z - local mean)^2, max log Z, max |cap z|, max |z|, rows]


def rope_rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Hugging Face's RoPE on x (B, H, T, D) with cos, sin (B, T, D): x cos + rotate_half(x) sin,
    rotate_half(x) = (-x2, x1) of the two halves."""
    cos, sin = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def allowed_keys(T: int, causal: bool, window: int, device: torch.device,
                 mask: torch.Tensor | None = None) -> torch.Tensor:
    """(T, T) bool: query i sees key j. Causal: j <= i; a sliding window of W keys:
    i - W < j <= i (normlab's model.sliding_window). An explicit mask (bool: True = masked, or
    additive float: -inf = masked) replaces both."""
    if mask is not None:
        m = mask[-T:, -T:] if mask.dim() == 2 else mask
        return ~m if m.dtype == torch.bool else torch.isfinite(m)
    i = torch.arange(T, device=device)
    ok = torch.ones(T, T, dtype=torch.bool, device=device)
    if causal:
        ok = i[None, :] <= i[:, None]
    if window > 0:
        ok = ok & (i[None, :] > i[:, None] - window)
    return ok


def _token_mask(m: torch.Tensor | None, x: torch.Tensor) -> torch.Tensor | None:
    """The padding mask as float (B, T) when it fits x's leading dimensions, else None."""
    if m is None or m.dim() != 2 or tuple(m.shape) != tuple(x.shape[:2]):
        return None
    return m.to(device=x.device, dtype=torch.float32)


@torch.no_grad()
def attention_stats(q: torch.Tensor, k: torch.Tensor, scale: float, cap: float,
                    ok: torch.Tensor, pad: torch.Tensor | None = None
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """(max |s| per head (H,), the ATTN vector) for q (B, H, T, D), k (B, Hkv, T, D), the (T, T)
    or (B, 1|H, T, T) mask ok of allowed keys and the padding mask pad (B, T) or None.
    Row entropy as -sum_j P_j log P_j (= lse - sum_j P_j s_j), masked keys at P = 0; the scores
    are edited in place so that a chunk costs one (B, h, T, T) buffer and its softmax."""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    q, k = q.float(), k.float()
    per = max(1, SCORE_CHUNK // max(1, B * T * T))
    m = _token_mask(pad, q.transpose(1, 2))
    if m is not None:  # keys: real ones only; rows: real queries that see a key
        ok = (ok if ok.dim() == 4 else ok[None, None]) & (m[:, None, None, :] > 0)
    ent = torch.zeros((), dtype=torch.float32, device=q.device)
    first = torch.zeros((), dtype=torch.float32, device=q.device)
    rows = torch.zeros((), dtype=torch.float32, device=q.device)
    first_rows = torch.zeros((), dtype=torch.float32, device=q.device)
    heads = []
    for h0 in range(0, H, per):
        h1 = min(H, h0 + per)
        kh = k[:, torch.arange(h0, h1, device=k.device) // G]  # query head h reads kv head h // G
        s = torch.matmul(q[:, h0:h1] * scale, kh.transpose(-1, -2))  # (B, h, T, T)
        okh = ok if ok.dim() == 2 else ok[:, :1] if ok.shape[1] == 1 else ok[:, h0:h1]
        notok = ~okh
        if m is None:
            row = None
        else:
            row = (okh.any(-1) & (m[:, None, :] > 0)).float().expand(B, h1 - h0, T)
            notok = notok | (row[..., None] == 0)
        s.masked_fill_(notok, 0.0)
        lo, hi = s.amin(dim=(0, 2, 3)), s.amax(dim=(0, 2, 3))
        heads.append(torch.maximum(-lo, hi))
        if cap > 0:
            s.div_(cap).tanh_().mul_(cap)
        s.masked_fill_(notok, float("-inf"))
        if row is not None:  # rows without a key: zeros, so that softmax stays finite
            s = torch.where(row[..., None] > 0, s, torch.zeros_like(s))
        p = torch.softmax(s, dim=-1)
        e = -torch.xlogy(p, p).sum(-1)  # (B, h, T)
        if row is None:
            ent = ent + e.sum()
            first = first + p[:, :, 1:, 0].sum()
            rows = rows + float(B * (h1 - h0) * T)
            first_rows = first_rows + float(B * (h1 - h0) * max(0, T - 1))
        else:
            ent = ent + (e * row).sum()
            first = first + (p[:, :, 1:, 0] * row[:, :, 1:]).sum()
            rows = rows + row.sum()
            first_rows = first_rows + row[:, :, 1:].sum()
    return torch.cat(heads), torch.stack([ent, rows, first, first_rows])


def resid_width(C: int) -> int:
    return RESID + C


@torch.no_grad()
def residual_stats(x: torch.Tensor, pad: torch.Tensor | None = None) -> torch.Tensor:
    """The resid_width(C) vector of the residual stream x (B, T, C) (any shape, the last dim C;
    the mask applies when x's first two dimensions are pad's): the channels' mean squares are
    the work, the mean square over every element their mean."""
    xf = x.detach().float()
    m = _token_mask(pad, xf)
    C = xf.shape[-1]
    if m is None:
        n = xf.new_full((), float(xf.numel() // max(1, C)))
        ch = xf.square().reshape(-1, C).mean(0)
        lo, hi = torch.aminmax(xf)
        return torch.cat([torch.stack([ch.mean(), torch.maximum(-lo, hi), n]), ch])
    n = m.sum()
    ch = (xf.square() * m.unsqueeze(-1)).reshape(-1, C).sum(0) / n.clamp_min(1.0)
    mx = (xf.abs().amax(-1) * m).amax()
    return torch.cat([torch.stack([ch.mean(), mx, n]), ch])


@torch.no_grad()
def logit_stats(z: torch.Tensor, cap: float, pad: torch.Tensor | None = None) -> torch.Tensor:
    """The LOGITS vector of the logits z (..., V): log Z over the rows of real tokens."""
    m = _token_mask(pad, z)
    zf = z.detach().float().reshape(-1, z.shape[-1])
    w = None if m is None else m.reshape(-1)
    raw = zf.abs().amax(-1)
    if cap > 0:
        zf = cap * torch.tanh(zf / cap)
    capped = zf.abs().amax(-1)
    lse = torch.logsumexp(zf, dim=-1)
    if w is None:
        n = lse.new_full((), float(lse.numel()))
        mean = lse.mean()
        return torch.stack([lse.sum(), (lse - mean).square().sum(), lse.amax(), capped.amax(),
                            raw.amax(), n])
    n = w.sum()
    mean = (lse * w).sum() / n.clamp_min(1.0)
    return torch.stack([(lse * w).sum(), ((lse - mean).square() * w).sum(),
                        torch.where(w > 0, lse, torch.full_like(lse, -math.inf)).amax(),
                        (capped * w).amax(), (raw * w).amax(), n])


# -- the host side: several processes' (or micro-batches') vectors into normlab's fields ----------

def combine_resid(rows: list[list[float]]) -> tuple[float, float, float]:
    """RMS over every token of every part, max over the parts, and the kurtosis of the channels'
    RMS s_j over every token (He et al. 2024's outlier-feature measure): mean(s^4) / mean(s^2)^2,
    1 when every channel has the same RMS, up to C when one channel carries the stream."""
    n = sum(r[2] for r in rows)
    if n <= 0:
        return math.nan, math.nan, math.nan
    t = torch.tensor(rows, dtype=torch.float64)  # (parts, RESID + C): one pass in C, not Python
    ch = (t[:, RESID:] * t[:, 2:3]).sum(0) / n  # each channel's mean square over every token
    m2 = ch.mean().item() if ch.numel() else math.nan
    kurt = ch.square().mean().item() / (m2 * m2) if ch.numel() and m2 > 0 else math.nan
    return math.sqrt(sum(r[0] * r[2] for r in rows) / n), max(r[1] for r in rows), kurt


def combine_attn(rows: list[list[float]]) -> tuple[float, float]:
    """Mean row entropy and mean mass on key 0 over every part's rows."""
    n, nf = sum(r[1] for r in rows), sum(r[3] for r in rows)
    ent = sum(r[0] for r in rows) / n if n > 0 else math.nan
    return ent, (sum(r[2] for r in rows) / nf if nf > 0 else (0.0 if n > 0 else math.nan))


def combine_logits(rows: list[list[float]]) -> tuple[float, float, float, float, float]:
    """log Z mean, population std (Chan et al.'s parallel variance), max; max |cap z|, max |z|."""
    n = sum(r[5] for r in rows)
    if n <= 0:
        return (math.nan,) * 5
    mean = sum(r[0] for r in rows) / n
    m2 = sum(r[1] + r[5] * (r[0] / r[5] - mean) ** 2 for r in rows if r[5] > 0)
    return (mean, math.sqrt(max(0.0, m2) / n), max(r[2] for r in rows),
            max(r[3] for r in rows), max(r[4] for r in rows))
