"""The chunked LM head against the oracle. normlab computes the logits, the loss and the head's
gradients a chunk of rows at a time (Transformer::forward); the tiny parity models fit in one chunk,
so here the driver forces chunks of 5 and 3 rows over B * T = 16 rows (ragged last chunks), with
and without final soft-cap and z-loss, tied and untied, and the losses and every gradient must
match the oracle at the parity tolerance.

    cd tests/reference && NORMLAB_BUILD_DIR=/work/main/build python -m pytest -q -s test_head_chunks.py
"""
from __future__ import annotations

import pytest
import torch

import harness
import ref_model
from ref_config import make_config
from ref_model import RefModel

torch.set_num_threads(1)

# (final_softcap, z_loss, tie_embeddings, placement, head chunk rows)
CASES = [(0.0, 0.0, True, "pre", 5), (1.5, 0.0, False, "post", 5), (0.0, 1e-2, False, "peri", 3),
         (1.5, 1e-2, True, "mix", 3)]


def case_config(cap, z, tie, placement):
    model = {"vocab_size": 32, "n_layer": 2, "d_model": 16, "n_head": 2, "d_ff": 24, "seq_len": 8,
             "placement": placement, "final_softcap": cap, "tie_embeddings": tie}
    return make_config(model, {}, {"z_loss": z, "batch_size": 2, "seed": 7})


@pytest.fixture(scope="module")
def summary():
    s = harness.Summary("test_head_chunks")
    yield s
    s.emit()


@pytest.mark.parametrize("cap,z,tie,placement,rows", CASES,
                         ids=[f"{p}-cap{c:g}-z{z:g}-{'tied' if t else 'untied'}-rows{r}"
                              for c, z, t, p, r in CASES])
def test_chunked_head_matches_oracle(cap, z, tie, placement, rows, tmp_path, summary):
    cfg = case_config(cap, z, tie, placement)
    model = RefModel(cfg)
    params = model.random_params(seed=31)
    idx, targets = ref_model.random_batch(model, 2, seed=32)
    assert idx.numel() % rows != 0 and idx.numel() > 2 * rows  # 3+ chunks, the last one ragged
    got = harness.run_driver(tmp_path, cfg, params, {"idx": idx, "targets": targets},
                             head_chunk=rows)
    ref = model.loss_and_grads(params, idx, targets)
    names = model.param_names()
    compared = ["logits", "loss", "ce", "z_loss"] + [f"grad.{n}" for n in names]
    harness.check(f"{placement}-rows{rows}", got, ref, compared, summary)
