"""Module maps of normlab.torch.Probe: where a PyTorch model keeps the pieces normlab's diagnostics
measure (its blocks, their attention and MLP parameters, the queries and keys, the residual stream
between the two sublayers, the embedding and the output head), as data: one record per family,
and ``resolve()``, which turns a record (or a user's map) into the modules of one model.

A record's paths are attribute paths (``"model.layers"``) from the model, those of the block
entries from each block. Every parameter of a block must fall under one of the prefixes of
``attn`` or ``mlp`` (the two sublayers, as normlab's parameter table groups them: a norm belongs
to the sublayer it normalizes or follows); a parameter outside the blocks is an embedding
(``embed``), the final norm (``final_norm``) or the head. A model whose parameters cannot be
placed is refused, naming them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

# qk_layout: how the hooked query/key modules' outputs are laid out.
#   "flat"  (B, T, H * D)       q_proj / k_proj outputs; OLMo 2's full-width q_norm
#   "bthd"  (B, T, H, D)        Qwen 3's per-head q_norm (before the transpose)
#   "bhtd"  (B, H, T, D)        Gemma 3's per-head q_norm (after the transpose)
#   "fused" (B, T, 3 C)         GPT-2 / nanoGPT c_attn: queries, keys, values side by side
#   "mha"                       nn.MultiheadAttention: q, k from its input and in_proj_weight
# rope: "kwargs" takes (cos, sin) from the attention module's `position_embeddings` argument
# (Hugging Face's rotate-half RoPE); None: positions are added to the embedding.
# mid: (module, "input" | "output") whose input or output is the residual stream after the
# attention sublayer (boundary 2l + 1).

FAMILY_FIELDS = ("layers", "attn", "q", "k", "qk_layout", "mid", "attn_params", "mlp_params",
                 "embed", "final_norm", "head")


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    classes: tuple[str, ...]      # model class names that select the record
    layers: str                   # the nn.ModuleList of blocks
    attn: str                     # per block: the attention module
    q: str                        # per block: the module whose output holds the queries
    k: str                        # per block: ... the keys ("" with a fused or mha layout)
    qk_layout: str
    mid: tuple[str, str]
    attn_params: tuple[str, ...]  # per block: parameter prefixes of the attention sublayer
    mlp_params: tuple[str, ...]   # per block: ... of the MLP sublayer
    embed: tuple[str, ...]        # token (and position) embedding modules
    final_norm: str               # "" when the model has none
    head: str                     # the module whose output is the logits ("" : none)
    rope: str | None = None
    placement: str = "pre"        # normlab's name of the norm placement
    norm: str = "rmsnorm"
    mlp: str = "swiglu"
    qk_norm: str = "none"
    qk_norm_scope: str = "head"
    # Mistral: model.config.sliding_window applies to every layer (its attention modules have no
    # sliding_window attribute)
    config_window: bool = False


def _hf(name: str, classes: tuple[str, ...], **kw: Any) -> Family:
    """A Hugging Face decoder: model.layers of blocks with self_attn and mlp."""
    base = dict(layers="model.layers", attn="self_attn", q="self_attn.q_proj",
                k="self_attn.k_proj", qk_layout="flat", mid=("post_attention_layernorm", "input"),
                attn_params=("input_layernorm.", "self_attn."),
                mlp_params=("post_attention_layernorm.", "mlp."), embed=("model.embed_tokens",),
                final_norm="model.norm", head="lm_head", rope="kwargs")
    base.update(kw)
    return Family(name=name, classes=classes, **base)


_GEMMA_SUBLAYERS = dict(
    mid=("pre_feedforward_layernorm", "input"),
    attn_params=("input_layernorm.", "self_attn.", "post_attention_layernorm."),
    mlp_params=("pre_feedforward_layernorm.", "mlp.", "post_feedforward_layernorm."),
    placement="peri", mlp="geglu")
_GPT2_LIKE = dict(layers="transformer.h", attn="attn", q="attn.c_attn", k="", qk_layout="fused",
                  mid=("ln_2", "input"), attn_params=("ln_1.", "attn."), mlp_params=("ln_2.", "mlp."),
                  embed=("transformer.wte", "transformer.wpe"), final_norm="transformer.ln_f",
                  head="lm_head", rope=None, norm="layernorm", mlp="gelu_tanh")

# One record per family (docs/python.md, "Probing a PyTorch run").
FAMILIES: tuple[Family, ...] = (
    _hf("llama", ("LlamaForCausalLM", "LlamaModel")),
    _hf("mistral", ("MistralForCausalLM", "MistralModel"), config_window=True),
    _hf("qwen2", ("Qwen2ForCausalLM", "Qwen2Model")),
    _hf("qwen3", ("Qwen3ForCausalLM", "Qwen3Model"), q="self_attn.q_norm", k="self_attn.k_norm",
        qk_layout="bthd", qk_norm="rmsnorm"),
    _hf("gemma2", ("Gemma2ForCausalLM", "Gemma2Model"), **_GEMMA_SUBLAYERS),
    _hf("gemma3", ("Gemma3ForCausalLM", "Gemma3TextModel"), q="self_attn.q_norm",
        k="self_attn.k_norm", qk_layout="bhtd", qk_norm="rmsnorm", **_GEMMA_SUBLAYERS),
    # OLMo 2: x + norm(attn(x)), x + norm(mlp(x)); the MLP's input is the residual stream.
    _hf("olmo2", ("Olmo2ForCausalLM", "Olmo2Model"), q="self_attn.q_norm", k="self_attn.k_norm",
        mid=("mlp", "input"), attn_params=("self_attn.", "post_attention_layernorm."),
        mlp_params=("mlp.", "post_feedforward_layernorm."), placement="reordered",
        qk_norm="rmsnorm", qk_norm_scope="full"),
    Family(name="gpt2", classes=("GPT2LMHeadModel", "GPT2Model"), **_GPT2_LIKE),
    # nanoGPT's GPT (model.py): the same layout as GPT-2, nn.Linear instead of Conv1D.
    Family(name="nanogpt", classes=("GPT",), **_GPT2_LIKE),
)


def family_for(model: nn.Module) -> Family | None:
    """The record whose class names include the model's class (or a base class) name."""
    names = [c.__name__ for c in type(model).__mro__]
    for fam in FAMILIES:
        if any(n in fam.classes for n in names):
            return fam
    return None


# -- resolution ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Block:
    """The modules of block l that the probe hooks."""
    module: nn.Module
    attn: nn.Module
    q: nn.Module
    k: nn.Module | None
    mid: nn.Module
    mid_side: str


@dataclasses.dataclass
class Resolved:
    """A model's family map, resolved to its modules, shapes and parameter groups."""
    family: str
    spec: Family
    blocks: list[Block]
    head: nn.Module | None
    n_head: int
    n_kv_head: int
    head_dim: int
    d_model: int
    vocab_size: int
    scales: list[float]               # attention scale per layer
    attn_softcap: float               # 0: off
    final_softcap: float              # 0: off
    windows: list[int]                # sliding window per layer (0: global)
    causal: bool
    # Parameters (deduplicated, tied ones once) and where each counts: layer (-1 outside the
    # blocks), sublayer (0 attention, 1 MLP, -1 outside) and normlab's group name.
    params: list[tuple[str, nn.Parameter, int, int, str]]
    notes: list[str]


def _get(root: nn.Module, path: str) -> Any:
    obj: Any = root
    for part in path.split("."):
        if isinstance(obj, (nn.ModuleList, nn.Sequential)) and part.isdigit():
            obj = obj[int(part)]
        else:
            obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_norm(m: nn.Module) -> bool:
    return isinstance(m, (nn.LayerNorm, nn.GroupNorm)) or "norm" in type(m).__name__.lower()


def _family_from_map(model: nn.Module, user: dict[str, Any]) -> Family:
    """A Family from a user's map (docs/python.md): the FAMILY_FIELDS, with defaults."""
    unknown = sorted(set(user) - set(FAMILY_FIELDS) - {"rope", "placement", "norm", "mlp",
                                                       "qk_norm", "qk_norm_scope", "n_head",
                                                       "n_kv_head", "head_dim", "vocab_size"})
    if unknown:
        raise ValueError(f"normlab.torch: unknown map entries {unknown}; the map's entries are "
                         f"{', '.join(FAMILY_FIELDS)} (docs/python.md)")
    missing = [f for f in ("layers", "attn", "q", "attn_params", "mlp_params", "mid", "embed")
               if f not in user]
    if missing:
        raise ValueError(f"normlab.torch: the map for {type(model).__name__} lacks "
                         f"{', '.join(missing)} (docs/python.md, 'Any other model')")
    kw = {f.name: user[f.name] for f in dataclasses.fields(Family) if f.name in user}
    for f in ("attn_params", "mlp_params", "embed"):
        kw[f] = (kw[f],) if isinstance(kw[f], str) else tuple(kw[f])
    kw["mid"] = tuple(kw["mid"]) if not isinstance(kw["mid"], str) else (kw["mid"], "input")
    kw.setdefault("k", "")
    kw.setdefault("qk_layout", "fused" if not kw["k"] else "flat")
    kw.setdefault("final_norm", "")
    kw.setdefault("head", "")
    return Family(name="map", classes=(), **kw)


def _encoder_family(model: nn.Module) -> tuple[Family, str] | None:
    """nn.TransformerEncoder anywhere in the model: its layers, its input embedding (the model's
    nn.Embedding modules) and the head (a Linear onto the embedding's vocabulary)."""
    enc_path = next((n for n, m in model.named_modules() if isinstance(m, nn.TransformerEncoder)),
                    None)
    if enc_path is None:
        return None
    enc = _get(model, enc_path) if enc_path else model
    layer0 = enc.layers[0]
    embeds = [n for n, m in model.named_modules() if isinstance(m, nn.Embedding)]
    vocab = _get(model, embeds[0]).num_embeddings if embeds else -1
    heads = [n for n, m in model.named_modules()
             if isinstance(m, nn.Linear) and m.out_features == vocab and not n.startswith(enc_path)]
    pre = bool(layer0.norm_first)
    act = getattr(layer0, "activation", None)
    mlp = "gelu" if act is torch.nn.functional.gelu or isinstance(act, nn.GELU) else "relu"
    fam = Family(
        name="torch_encoder", classes=(), layers=f"{enc_path}.layers" if enc_path else "layers",
        attn="self_attn", q="self_attn", k="", qk_layout="mha",
        mid=("norm2", "input") if pre else ("norm1", "output"),
        attn_params=("self_attn.", "norm1."), mlp_params=("linear1.", "linear2.", "norm2."),
        embed=tuple(embeds), final_norm=f"{enc_path}.norm" if enc.norm is not None else "",
        head=heads[-1] if heads else "", placement="pre" if pre else "post", norm="layernorm",
        mlp=mlp)
    return fam, enc_path


def resolve(model: nn.Module, user_map: dict[str, Any] | None = None) -> Resolved:
    """The model's modules under its family's record, a user's map, or nn.TransformerEncoder's;
    ValueError naming what is missing when none fits."""
    notes: list[str] = []
    cfg = getattr(model, "config", None)
    if user_map is not None:
        fam = _family_from_map(model, user_map)
    elif (fam := family_for(model)) is None:
        enc = _encoder_family(model)
        if enc is None:
            raise ValueError(
                f"normlab.torch: no module map for {type(model).__name__} (known: Hugging Face "
                f"{', '.join(f.name for f in FAMILIES[:-1])}, nanoGPT's GPT, models holding an "
                "nn.TransformerEncoder); pass map={'layers': ..., 'attn': ..., 'q': ..., 'k': "
                "..., 'mid': ..., 'attn_params': ..., 'mlp_params': ..., 'embed': ..., "
                "'head': ...} (docs/python.md, 'Any other model')")
        fam = enc[0]
    layers = _get(model, fam.layers)
    if not isinstance(layers, (nn.ModuleList, nn.Sequential)) or len(layers) == 0:
        raise ValueError(f"normlab.torch: {type(model).__name__} ({fam.name} map) has no list of "
                         f"blocks at '{fam.layers}'")
    blocks, missing = [], []
    for l, blk in enumerate(layers):
        got = {f: _get(blk, p) for f, p in (("attn", fam.attn), ("q", fam.q), ("mid", fam.mid[0]))}
        got["k"] = _get(blk, fam.k) if fam.k else None
        for f, m in got.items():
            if m is None and (f != "k" or fam.k):
                missing.append(f"layers[{l}].{getattr(fam, f) if f != 'mid' else fam.mid[0]} ({f})")
        if not missing:
            blocks.append(Block(blk, got["attn"], got["q"], got["k"], got["mid"], fam.mid[1]))
    head = _get(model, fam.head) if fam.head else None
    if fam.head and head is None:
        missing.append(f"{fam.head} (head)")
    embeds = [(_get(model, p), p) for p in fam.embed]
    missing += [f"{p} (embed)" for m, p in embeds if m is None]
    if missing:
        raise ValueError(f"normlab.torch: {type(model).__name__} does not have what the "
                         f"{fam.name} map names: {', '.join(missing)}")
    if head is None:
        notes.append("no output head found: log Z and output-logit statistics are not recorded")

    attn0 = blocks[0].attn
    if fam.qk_layout == "mha":
        n_head, d_model = attn0.num_heads, attn0.embed_dim
        n_kv, head_dim = n_head, d_model // n_head
    elif cfg is not None and hasattr(cfg, "num_attention_heads"):
        n_head = cfg.num_attention_heads
        n_kv = getattr(cfg, "num_key_value_heads", None) or n_head
        d_model = cfg.hidden_size
        head_dim = getattr(cfg, "head_dim", None) or d_model // n_head
    elif cfg is not None and hasattr(cfg, "n_head"):  # GPT-2, nanoGPT
        n_head, d_model = cfg.n_head, cfg.n_embd
        n_kv, head_dim = n_head, d_model // n_head
    else:
        user = user_map or {}
        if "n_head" not in user:
            raise ValueError(f"normlab.torch: cannot tell the number of heads of "
                             f"{type(model).__name__}: add 'n_head' to the map")
        n_head = int(user["n_head"])
        n_kv = int(user.get("n_kv_head", n_head))
        emb = embeds[0][0]
        d_model = emb.embedding_dim if isinstance(emb, nn.Embedding) else int(user["d_model"])
        head_dim = int(user.get("head_dim", d_model // n_head))
    emb0 = embeds[0][0] if embeds else None
    vocab = (emb0.num_embeddings if isinstance(emb0, nn.Embedding)
             else getattr(cfg, "vocab_size", 0) or int((user_map or {}).get("vocab_size", 0)))

    scales, windows = [], []
    for b in blocks:
        s = getattr(b.attn, "scaling", None)
        scales.append(float(s) if s is not None else 1.0 / math.sqrt(head_dim))
        windows.append(int(getattr(b.attn, "sliding_window", None) or 0))
    if fam.config_window and getattr(cfg, "sliding_window", None):
        windows = [int(cfg.sliding_window)] * len(blocks)
    attn_cap = float(getattr(attn0, "attn_logit_softcapping", None) or 0.0)
    final_cap = float(getattr(cfg, "final_logit_softcapping", None) or 0.0) if cfg else 0.0
    causal = bool(getattr(attn0, "is_causal", True)) if fam.qk_layout != "mha" else True

    params = _place_params(model, fam, layers)
    return Resolved(fam.name, fam, blocks, head, n_head, n_kv, head_dim, d_model, vocab, scales,
                    attn_cap, final_cap, windows, causal, params, notes)


def _place_params(model: nn.Module, fam: Family, layers: nn.Module):
    """Every trainable parameter once, with its layer, sublayer and normlab group."""
    block_of = {id(b): l for l, b in enumerate(layers)}
    owner: dict[int, tuple[int, str]] = {}  # id(block) -> layer, prefix of its path
    for name, m in model.named_modules():
        if id(m) in block_of:
            owner[block_of[id(m)]] = (block_of[id(m)], name + ".")
    seen, out, unplaced = set(), [], []
    modules = dict(model.named_modules())
    for name, p in model.named_parameters():  # tied parameters come once, first name
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        mod = modules.get(name.rsplit(".", 1)[0], None) if "." in name else model
        is_norm = mod is not None and _is_norm(mod)
        placed = None
        for l, prefix in owner.values():
            if name.startswith(prefix):
                rel = name[len(prefix):]
                if rel.startswith(fam.attn_params):
                    placed = (l, 0, "norm" if is_norm else "attention")
                elif rel.startswith(fam.mlp_params):
                    placed = (l, 1, "norm" if is_norm else "mlp")
                else:
                    unplaced.append(name)
                    placed = ()
                break
        if placed is None:
            if any(name.startswith(e + ".") for e in fam.embed):
                placed = (-1, -1, "embedding")
            elif fam.final_norm and name.startswith(fam.final_norm + "."):
                placed = (-1, -1, "norm")
            elif fam.head and name.startswith(fam.head + "."):
                placed = (-1, -1, "head")
            else:
                unplaced.append(name)
                placed = ()
        if placed:
            out.append((name, p, *placed))
    if unplaced:
        raise ValueError(f"normlab.torch: the {fam.name} map places no sublayer or group for the "
                         f"parameters {', '.join(unplaced[:8])}"
                         f"{' ...' if len(unplaced) > 8 else ''}: extend attn_params / mlp_params "
                         "/ embed / final_norm / head (docs/python.md)")
    return out
