"""normlab.Optimizer: normlab's optimizer (whichever optim.name names: docs/cli.md, "Optimizers";
with QK-Clip when optim.qk_clip > 0) over a Model's parameters, stepped on its own, so that a
notebook can step it beside another implementation; its state by name, each tensor with the shape
the optimizer gives it; docs/python.md."""
from __future__ import annotations

from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from . import _core
from ._config import _as_config
from ._errors import InputError

if _TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    import numpy as np

    from ._config import Config
    from ._model import Model


class Optimizer:
    """``Optimizer(cfg, model)``: the optimizer ``cfg``'s optim section names over ``model``'s
    parameters (``cfg``'s model section must be the model's; ``train.matmul_precision`` sets the
    precision of Muon's Newton-Schulz products). ``step(grads, lr)`` updates the model's
    parameters in place; ``state`` holds the optimizer's tensors by checkpoint name as numpy
    views (``adam.m.<param>``, ``muon.momentum.<param>``, ...)."""

    def __init__(self, cfg: Config | Mapping[str, Any], model: Model) -> None:
        c = _as_config(cfg)
        self._model = model
        self._o = _core.Optimizer(c._c, model._m)

    def step(self, grads: Mapping[str, Any] | None, lr: float, *, grad_scale: float = 1.0,
             attn_max_logit: Any = None) -> None:
        """One step at learning rate ``lr``. ``grads`` ({name: array shaped as the parameter})
        is written into the model's gradient memory first; None steps on what is there (the last
        ``Model.loss_and_grads``). ``grad_scale`` multiplies the gradients (a clip factor).
        ``attn_max_logit`` (n_layer, n_head): the step's largest |attention logit| per layer and
        query head, which QK-Clip needs."""
        if grads is not None:
            mine = self._model.gradients()
            unknown = sorted(set(grads) - set(mine))
            if unknown:
                raise InputError(f"[optimizer] no parameter named {', '.join(unknown)}")
            for name, g in grads.items():
                a = _np.asarray(g, dtype=_np.float32)
                if a.shape != mine[name].shape:
                    raise InputError(f"[optimizer] gradient '{name}' has shape {a.shape}, the "
                                     f"parameter {mine[name].shape}")
                mine[name][...] = a
        mx = None
        if attn_max_logit is not None:
            mx = _np.ascontiguousarray(attn_max_logit, dtype=_np.float64).reshape(-1)
        self._o.step(float(lr), float(grad_scale), mx)

    @property
    def state(self) -> dict[str, np.ndarray]:
        """{checkpoint name: float32 view of the optimizer's memory}."""
        return self._o.state()

    def lr_multipliers(self) -> dict[str, float]:
        """{parameter name: the factor on the schedule's learning rate}: μP's rule for this
        optimizer (1 for every parameter under the standard parametrization; docs/mup.md)."""
        return dict(self._o.lr_multipliers())

    @property
    def steps_taken(self) -> int:
        return self._o.steps_taken

    @property
    def name(self) -> str:
        return self._o.name

    @property
    def qk_clip(self) -> dict[str, float]:
        """QK-Clip of the last step: {"heads": query heads clipped, "max_logit": the largest
        attention logit before the clip} (zeros when QK-Clip is off)."""
        return {"heads": self._o.qk_clip_heads, "max_logit": self._o.qk_clip_max_logit}
