"""normlab.Model (a model with numpy views of its parameters) and normlab.Run (a run directory:
its config, metrics, checkpoints, evaluation and generation); docs/python.md."""
from __future__ import annotations

import json as _json
import struct as _struct
from pathlib import Path as _Path
from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from . import _core, _progress
from ._errors import FormatError, InputError
from ._errors import NotFoundError
from ._metrics import Metrics

if _TYPE_CHECKING:  # names of the annotations only: the module's namespace holds the API alone
    import os
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import Any, Union

    import numpy as np

    PathLike = Union[str, os.PathLike]

from ._config import Config, _as_config, _need  # noqa: E402


# -- model ------------------------------------------------------------------------------------

_INT32 = _np.iinfo(_np.int32)


def _ids(a: Any, vocab: int, what: str) -> tuple[np.ndarray, bool]:
    """Token ids as a (B, T) C-contiguous int32 array, and whether the input was 1-D."""
    arr = _np.asarray(a)
    if arr.dtype.kind not in "iu":
        raise InputError(f"[model] {what} ids must be an integer array, got dtype {arr.dtype}")
    if arr.ndim not in (1, 2):
        raise InputError(f"[model] {what} ids must have shape (T,) or (B, T), got shape "
                         f"{arr.shape}")
    flat = arr.reshape(-1)
    # Ids beyond int32 would wrap in the conversion: refuse them here with the library's message.
    if flat.size and (flat.min() < _INT32.min or flat.max() > _INT32.max):
        pos = int(_np.flatnonzero((flat < _INT32.min) | (flat > _INT32.max))[0])
        raise InputError(f"{what} id {int(flat[pos])} at position {pos} is outside the vocabulary "
                         f"[0, {vocab})")
    out = _np.ascontiguousarray(arr, dtype=_np.int32)
    return (out[None, :] if arr.ndim == 1 else out), arr.ndim == 1


def _safetensors_metadata(path: PathLike) -> dict[str, str]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise FormatError(f"[safetensors] {path}: file too short for a header")
        (n,) = _struct.unpack("<Q", head)
        try:
            return _json.loads(f.read(n)).get("__metadata__", {}) or {}
        except (ValueError, UnicodeDecodeError) as e:
            raise FormatError(f"[safetensors] {path}: header is not JSON: {e}") from None


class Model:
    """A decoder-only Transformer with its parameters in normlab's memory.

    ``Model(cfg)`` initialises from ``seed`` (default ``train.seed``) as ``model.init`` says, for
    batches of up to ``max_batch`` (default ``train.batch_size``) sequences of up to
    ``model.seq_len`` tokens. Tokens are numpy arrays of any integer dtype, shape (T,) or (B, T).
    """

    def __init__(self, cfg: Config | Mapping[str, Any] | PathLike | None = None, *,
                 seed: int | None = None, max_batch: int | None = None) -> None:
        c = _as_config(cfg)
        self._m = _core.Model(c._c, c["train.seed"] if seed is None else seed,
                              c["train.batch_size"] if max_batch is None else max_batch)
        self._z = c["train.z_loss"]

    @classmethod
    def load(cls, path: PathLike, max_batch: int = 1) -> Model:
        """A model from a run directory (its latest checkpoint), a checkpoint folder, or a
        safetensors file written by ``Model.save`` or a checkpoint."""
        p = _Path(path)
        _need(p, f"[checkpoint] {p} does not exist")
        m = cls.__new__(cls)
        if p.is_file() and p.name != "model.safetensors":
            meta = _safetensors_metadata(p)
            if "normlab_config" not in meta:
                raise FormatError(f"[checkpoint] {p}: no normlab_config metadata (not written by "
                                  "normlab)")
            cfg = Config._wrap(_core.config_from_json(meta["normlab_config"]))
            m._m = _core.Model(cfg._c, 0, max_batch)
            m._m.load_weights(str(p))
        else:
            m._m = _core.Model.load(str(p), max_batch)
            cfg = Config._wrap(_core.checkpoint_config(str(p)))
        m._z = cfg["train.z_loss"]
        return m

    @property
    def config(self) -> Config:
        """The model section (other sections at their defaults)."""
        return Config._wrap(self._m.config())

    @property
    def max_batch(self) -> int:
        return self._m.max_batch

    @property
    def num_params(self) -> int:
        return self._m.num_params

    def _vocab(self) -> int:
        return self.config["model.vocab_size"]

    def forward(self, tokens: Any) -> np.ndarray:
        """Logits after the final soft-cap: (T, V) for (T,) tokens, (B, T, V) for (B, T)."""
        ids, one = _ids(tokens, self._vocab(), "token")
        out = self._m.logits(ids)
        return out[0] if one else out

    __call__ = forward

    def _pair(self, tokens: Any, targets: Any) -> tuple[np.ndarray, np.ndarray]:
        v = self._vocab()
        ids, _ = _ids(tokens, v, "token")
        tgt, _ = _ids(targets, v, "target")
        if ids.shape != tgt.shape:
            raise InputError(f"[model] tokens {ids.shape} and targets {tgt.shape} differ in shape")
        return ids, tgt

    def loss(self, tokens: Any, targets: Any, z_loss: float | None = None) -> dict[str, float]:
        """Mean loss over the tokens: {"loss", "ce", "z_loss", "log_z"} (loss = ce + z_loss,
        z_loss weighted by ``z_loss``, default the config's train.z_loss)."""
        ids, tgt = self._pair(tokens, targets)
        return self._m.loss(ids, tgt, self._z if z_loss is None else z_loss)

    def loss_and_grads(self, tokens: Any, targets: Any, z_loss: float | None = None
                       ) -> tuple[dict[str, float], dict[str, np.ndarray]]:
        """The loss as ``loss()`` and the gradient of the mean loss for every parameter, as
        views on normlab's gradient memory (overwritten by the next call: copy to keep)."""
        ids, tgt = self._pair(tokens, targets)
        losses = self._m.loss_and_grads(ids, tgt, self._z if z_loss is None else z_loss)
        return losses, self._m.gradients()

    def gradients(self) -> dict[str, np.ndarray]:
        """The gradients of the last ``loss_and_grads`` (views; zeros before the first)."""
        return self._m.gradients()

    def parameters(self) -> dict[str, np.ndarray]:
        """{name: float32 array} in table order: views on the model's own memory, so writing
        into them changes the model (and they keep the model alive)."""
        return self._m.parameters()

    def param_table(self) -> list[dict[str, Any]]:
        """One dict per parameter: name, shape, group (embedding, attention, mlp, norm, head),
        decay (whether AdamW's weight decay applies), init ("normal", "uniform" or "constant") and
        init_scale (its std, bound or value), and against μP's base model (model.parametrization
        = "mup"; 0 and 1s otherwise) width_dims (how many dimensions are widths), fan_in_mult and
        fan_out_mult (width / base width of the last and first dimension), and mup_class, μP's
        shape class (src/model/mup.h: "fixed", "vector-like", "matrix-like" or "readout-like")."""
        return [{"name": n, "shape": tuple(s), "group": g, "decay": d, "init": i,
                 "init_scale": sc, "width_dims": w, "fan_in_mult": fi, "fan_out_mult": fo,
                 "mup_class": c}
                for n, s, g, d, i, sc, w, fi, fo, c in self._m.param_table()]

    def save(self, path: PathLike) -> None:
        """Writes the parameters to a safetensors file (checkpoint names, float32, the config in
        the metadata); ``Model.load(path)`` and ``load_weights(path)`` read it back."""
        self._m.save(str(path))

    def load_weights(self, path: PathLike) -> None:
        """Reads this model's parameters from a safetensors file that holds exactly its tensors;
        nothing changes when a tensor is missing, extra or of another shape (FormatError)."""
        p = _Path(path)
        _need(p, f"[safetensors] {p}: cannot open: No such file or directory")
        self._m.load_weights(str(p / "model.safetensors" if p.is_dir() else p))

    def generate(self, prompt: Any, max_new_tokens: int = 200, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 1) -> np.ndarray:
        """Samples ``max_new_tokens`` ids after the prompt ids (KV cache; temperature 0 is
        greedy). Returns the new ids."""
        ids, _ = _ids(prompt, self._vocab(), "token")
        return _np.asarray(self._m.generate(ids.reshape(-1).tolist(), max_new_tokens, temperature,
                                           top_k, top_p, seed), dtype=_np.int64)


# -- runs -------------------------------------------------------------------------------------

class Run:
    """A run directory: its config, metrics, checkpoints, and models from them."""

    def __init__(self, path: PathLike) -> None:
        self.path = _Path(path)
        _need(self.path, f"{self.path} is not a run directory (no such directory)")
        if not self.path.is_dir():
            raise FormatError(f"{self.path} is not a run directory (it is a file)")
        self.result: dict[str, Any] | None = None  # set by train(): what the trainer returned

    def __repr__(self) -> str:
        return f"normlab.Run({str(self.path)!r})"

    @property
    def config(self) -> Config:
        return Config(self.path / "config.toml")

    def _records(self) -> list[dict[str, Any]]:
        f = self.path / "metrics.jsonl"
        if not f.is_file():
            return []
        out = []
        for line in f.read_text().splitlines():
            try:
                out.append(_json.loads(line))
            except ValueError:  # a torn last line of a killed run
                pass
        return out

    @property
    def metrics(self) -> Metrics:
        """Every logged step, in file order: a list of the dicts metrics.jsonl holds (non-finite
        values as None) that also gives columns, ``metrics["loss"]`` a numpy array aligned with
        ``metrics["step"]`` (NaN where a record lacks the field), and ``metrics.to_pandas()``."""
        return Metrics(r for r in self._records() if "event" not in r)

    @property
    def records(self) -> list[dict[str, Any]]:
        """The step records as a plain list of dicts (``list(run.metrics)``)."""
        return list(self.metrics)

    @property
    def events(self) -> list[dict[str, Any]]:
        """The records that are not steps (rollbacks, the end of each process's run)."""
        return [r for r in self._records() if "event" in r]

    @property
    def status(self) -> str:
        """done, interrupted or diverged (the last end event), "" without one."""
        ends = [e for e in self.events if e.get("event") == "end"]
        return ends[-1].get("reason", "") if ends else ""

    @property
    def checkpoints(self) -> list[Path]:
        """The complete checkpoint folders, oldest first."""
        root = self.path / "checkpoints"
        if not root.is_dir():
            return []
        return sorted(p for p in root.glob("step_*")
                      if p.is_dir() and "." not in p.name  # not .tmp, .trash, .damaged
                      and (p / "model.safetensors").is_file())

    def _checkpoint(self, step: int | None) -> Path:
        if step is None:
            return self.path
        p = self.path / "checkpoints" / f"step_{step:08d}"
        if p not in self.checkpoints:
            have = ", ".join(str(int(c.name[5:])) for c in self.checkpoints) or "none"
            raise NotFoundError(f"{self.path} has no checkpoint at step {step} (steps: {have})",
                                str(p))
        return p

    def model(self, step: int | None = None, max_batch: int = 1) -> Model:
        """The model of the latest checkpoint, or of the checkpoint at ``step``."""
        return Model.load(self._checkpoint(step), max_batch)

    def eval(self, data: PathLike | None = None, batches: int = 0,
             step: int | None = None, progress: bool | None = None) -> dict[str, Any]:
        """As ``normlab eval``: validation loss, perplexity, bits per byte of the checkpoint on
        its own validation split (or on ``data``): every token once when that fits the budget
        (0 batches, the default; else train.eval_batches), or a sample of ``batches`` batches;
        ``exact``, ``tokens`` and ``sample`` say what was measured (docs/metrics.md). A progress
        bar counts the targets scored, as ``train``'s counts steps (``progress``: see train)."""
        if data is not None:
            _need(data, f"[data] {data}: no such file or folder")
        bar = _progress.bar(progress, desc="eval", unit="tok", unit_scale=True)
        hook = None
        if bar is not None:
            def hook(done: int, total: int) -> None:
                bar.total = total
                _progress.advance(bar, done)
        try:
            return _core.evaluate(str(self._checkpoint(step)), "" if data is None else str(data),
                                  batches, hook)
        finally:
            if bar is not None:
                bar.close()

    def generate(self, prompt: str, max_new_tokens: int = 200, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 1, ignore_eos: bool = False,
                 step: int | None = None) -> str:
        """As ``normlab generate --prompt``: the text that follows ``prompt`` (the run's
        tokenizer; stops at its end-of-sequence token unless ``ignore_eos``)."""
        return _core.generate_text(str(self._checkpoint(step)), prompt, max_new_tokens,
                                   temperature, top_k, top_p, seed, ignore_eos)
