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

Everything stays on the device; the values land in preallocated float32 tensors, read by the host
once per flush.
"""
from __future__ import annotations

import torch

# Scores materialised at once: heads are processed in chunks of at most this many elements of
# (B, heads, T, T), so that a probed step needs O(B T^2) extra memory whatever the head count.
SCORE_CHUNK = 1 << 24


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


@torch.no_grad()
def attention_stats(q: torch.Tensor, k: torch.Tensor, scale: float, cap: float,
                    ok: torch.Tensor, out_max_head: torch.Tensor,
                    out_entropy: torch.Tensor, out_first: torch.Tensor | None = None) -> None:
    """Writes max |s| per head into out_max_head (H,), the mean row entropy into out_entropy
    (0-d) and, when given, the mean probability on key 0 over the batch, heads and query rows
    1 .. T-1 into out_first (0-d; 0 for T = 1), for q (B, H, T, D), k (B, Hkv, T, D) and the
    (T, T) or (B, 1|H, T, T) mask ok.
    Row entropy as -sum_j P_j log P_j (= lse - sum_j P_j s_j), masked keys at P = 0; the scores
    are edited in place so that a chunk costs one (B, h, T, T) buffer and its softmax."""
    B, H, T, D = q.shape
    G = H // k.shape[1]
    q, k = q.float(), k.float()
    per = max(1, SCORE_CHUNK // max(1, B * T * T))
    ent = torch.zeros((), dtype=torch.float32, device=q.device)
    first = torch.zeros((), dtype=torch.float32, device=q.device)
    for h0 in range(0, H, per):
        h1 = min(H, h0 + per)
        kh = k[:, torch.arange(h0, h1, device=k.device) // G]  # query head h reads kv head h // G
        s = torch.matmul(q[:, h0:h1] * scale, kh.transpose(-1, -2))  # (B, h, T, T)
        notok = ~(ok if ok.dim() == 2 else ok[:, :1] if ok.shape[1] == 1 else ok[:, h0:h1])
        s.masked_fill_(notok, 0.0)
        lo, hi = s.amin(dim=(0, 2, 3)), s.amax(dim=(0, 2, 3))
        out_max_head[h0:h1] = torch.maximum(-lo, hi)
        if cap > 0:
            s.div_(cap).tanh_().mul_(cap)
        s.masked_fill_(notok, float("-inf"))
        p = torch.softmax(s, dim=-1)
        ent -= torch.xlogy(p, p).sum()
        first += p[:, :, 1:, 0].sum()
    out_entropy.copy_(ent / (B * H * T))
    if out_first is not None:
        out_first.copy_(first / (B * H * (T - 1)) if T > 1 else torch.zeros_like(first))


@torch.no_grad()
def residual_stats(x: torch.Tensor, out: torch.Tensor) -> None:
    """out (2,) = RMS and max |x| of the residual stream x (any shape, the last dim C)."""
    xf = x.detach().float()
    out[0] = torch.linalg.vector_norm(xf) / (xf.numel() ** 0.5)
    lo, hi = torch.aminmax(xf)
    out[1] = torch.maximum(-lo, hi)


@torch.no_grad()
def logit_stats(z: torch.Tensor, cap: float, out: torch.Tensor) -> None:
    """out (5,) = log Z mean, std, max, max |cap(z)|, max |z| of the logits z (..., V)."""
    zf = z.detach().float().reshape(-1, z.shape[-1])
    raw = zf.abs().amax()
    if cap > 0:
        zf = cap * torch.tanh(zf / cap)
    lse = torch.logsumexp(zf, dim=-1)
    mean = lse.mean()
    out[0] = mean
    out[1] = (lse - mean).square().mean().sqrt()  # population std, without cancellation
    out[2] = lse.amax()
    out[3] = zf.abs().amax()
    out[4] = raw
