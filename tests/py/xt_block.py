"""What the x-transformers parity tests (test_dyt_parity.py, test_residual_scale_parity.py) share:
float32-representable float64 tensors, the links from an x-transformers TransformerBlock's
attention and MLP matrices to normlab's block-0 names, and the reference run of such a block (its
output and every gradient for a random input and output gradient)."""
import torch

B, T, C = 2, 8, 16  # the shapes both tests use


def f32(t):
    """A float64 tensor of float32-representable values."""
    return t.float().double()


def link_linears(tp, params, grads, attn, mlp):
    """Writes the block's q/k/v (fused into wqkv), output and MLP matrices and MLP biases into
    params under normlab's names, and their gradient getters into grads. tp: the block's
    named_parameters(); attn, mlp: the prefixes of its attention and feed-forward modules."""
    qkv = [attn + "to_q.weight", attn + "to_k.weight", attn + "to_v.weight"]
    params["blocks.0.attn.wqkv.weight"] = torch.cat([tp[n].detach() for n in qkv]).float()
    grads["blocks.0.attn.wqkv.weight"] = lambda: torch.cat([tp[n].grad for n in qkv])
    for ours, theirs in (("attn.wo.weight", attn + "to_out.weight"),
                         ("mlp.w_in.weight", mlp + "0.0.weight"), ("mlp.w_in.bias", mlp + "0.0.bias"),
                         ("mlp.w_out.weight", mlp + "2.weight"), ("mlp.w_out.bias", mlp + "2.bias")):
        params["blocks.0." + ours] = tp[theirs].detach().float()
        grads["blocks.0." + ours] = lambda n=theirs: tp[n].grad


def reference(block, model, grads, seed):
    """The block on x ~ 1.5 N(0, 1) with output gradient dy ~ N(0, 1) (both float32-representable):
    -> (x, dy, {"y", "dx", "grad.<normlab name>"}). grads must cover every block-0 parameter of the
    oracle `model`."""
    names = set(model.block_param_names())
    assert set(grads) == names, sorted(set(grads) ^ names)
    gen = torch.Generator().manual_seed(seed)
    x = f32(1.5 * torch.randn(B, T, C, generator=gen, dtype=torch.float64))
    dy = f32(torch.randn(B, T, C, generator=gen, dtype=torch.float64))
    xr = x.clone().requires_grad_(True)
    y = block(xr)
    block.zero_grad()
    (y * dy).sum().backward()
    ref = {"y": y.detach(), "dx": xr.grad}
    ref.update({f"grad.{n}": g() for n, g in grads.items()})
    return x, dy, ref


def check_oracle_block(model, params, x, dy, ref):
    """The oracle's block (float64) against the x-transformers reference: every tensor within
    1e-10."""
    ours = model.block_grads(params, x, dy)
    assert set(ours) == set(ref)
    for k in ref:
        torch.testing.assert_close(ours[k], ref[k], rtol=1e-10, atol=1e-10,
                                   msg=lambda m, k=k: f"{k}: {m}")
