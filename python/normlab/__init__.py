"""normlab from Python: configs, models, training runs and the lab (gradient flow, sweeps,
reports) with numpy in and out, computed by normlab's C++ kernels (docs/python.md).

    import normlab
    cfg = normlab.Config("configs/tiny.toml").set("model.placement", "peri")
    run = normlab.train(cfg, out="runs/peri")
    print(run.metrics[-1]["loss"])

Errors are raised with the messages the CLI prints: ``ConfigError`` (every problem at once),
``InputError``, ``FormatError``, all three ``ValueError`` subclasses, and ``NotFoundError`` for a
path that does not exist (a ``FormatError`` and a ``FileNotFoundError``). The warnings
``normlab train`` prints are ``NormlabWarning``s.
"""
from __future__ import annotations

import json as _json
import os as _os
import re as _re
import struct as _struct
import subprocess as _subprocess
import sys as _sys
import time as _time
import warnings as _warnings
from collections.abc import Mapping as _Mapping
from pathlib import Path as _Path
from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from . import _core, _progress
from ._errors import ConfigError, Error, FormatError, InputError, InternalError, NormlabWarning
from ._errors import ConfigFileNotFoundError as _ConfigFileNotFoundError
from ._errors import NotFoundError
from ._metrics import Metrics

if _TYPE_CHECKING:  # names of the annotations only: the module's namespace holds the API alone
    import os
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import Any, Union

    import numpy as np

    PathLike = Union[str, os.PathLike]

__version__: str = _core.__version__

__all__ = [
    "Config", "Model", "Run", "Metrics", "SweepResult", "train", "doctor", "gradflow", "sweep",
    "report", "set_num_threads", "get_num_threads", "Error", "ConfigError", "InputError",
    "FormatError", "NotFoundError", "InternalError", "NormlabWarning", "__version__",
]


# -- config -----------------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers, paths as strings."""
    if isinstance(value, _np.generic):
        return value.item()
    if isinstance(value, _os.PathLike):
        return _os.fspath(value)
    return value


def _value_text(value: Any) -> str:
    """A Python value as the text of a `--set KEY=VALUE` override."""
    value = _plain(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _by_key(e: ConfigError, sets: Iterable[str] = ()) -> ConfigError:
    """``e`` with each problem named by its key, as a dict or ``set()`` gave it: the prefixes
    that say which reader a value went through (``--set 'model.n_layr=3': ``, ``json: ``, a line
    of the TOML text Config passes between calls), which would send a Python user looking for a
    command line or a file, are dropped. Duplicates are listed once."""
    prefixes = ([f"--set '{s}': " for s in sets] + [f"override '{s}': " for s in sets]
                + ["json: "])
    problems: list[str] = []
    for p in e.problems:
        pre = next((x for x in prefixes if p.startswith(x)), "")
        if not pre:
            m = _re.match(r"config:\d+(?::\d+)?: ", p)
            pre = m.group(0) if m else ""
        if p[len(pre):] not in problems:
            problems.append(p[len(pre):])
    return ConfigError("invalid configuration:" + "".join("\n  " + p for p in problems), problems)


def _parse(text: str, sets: list[str]) -> Any:
    try:
        return _core.config_parse(text, "config", sets)
    except ConfigError as e:
        raise _by_key(e, sets) from None


def _need(path: PathLike, message: str) -> None:
    """Raises NotFoundError(message) when nothing exists at ``path``."""
    if not _os.path.exists(path):
        raise NotFoundError(message, _os.fspath(path))


class Config:
    """A normlab configuration (model, optim, train, data, diag, dist sections).

    ``Config()`` holds the defaults; ``Config("run.toml")`` reads a TOML file (or a run
    directory's config.toml); ``Config({"model": {"placement": "peri"}})`` or
    ``Config({"model.placement": "peri"})`` takes a dict. Every way validates as the CLI does and
    raises one ``ConfigError`` listing every problem, each named by its key
    (``unknown key 'model.n_layr' (did you mean 'model.n_layer'?)``); a file that does not exist
    raises ``NotFoundError``.
    """

    def __init__(self, source: Config | Mapping[str, Any] | PathLike | None = None) -> None:
        if source is None:
            self._c = _core.config_load("", [])
        elif isinstance(source, Config):
            self._c = _core.config_parse(source.to_toml(), "config", [])
        elif isinstance(source, _Mapping):
            nested: dict[str, Any] = {}
            flat: list[str] = []
            for k, v in source.items():
                if isinstance(v, _Mapping):
                    nested[k] = dict(v)
                else:
                    flat.append(f"{k}={_value_text(v)}")
            try:
                base = _core.config_from_json(_json.dumps(nested, default=_plain))
            except ConfigError as e:  # the flat keys' problems too: every problem at once
                problems = list(e.problems)
                try:
                    _core.config_parse("", "config", flat)
                except ConfigError as e2:  # those of reading them, not the defaults' validation
                    problems += [p for p in e2.problems
                                 if p.startswith(("override '", "--set '"))]
                raise _by_key(ConfigError("", problems), flat) from None
            self._c = _parse(_core.config_to_toml(base), flat)
        else:
            path = _Path(source)
            if path.is_dir():
                path = path / "config.toml"
            if not path.exists():
                raise _ConfigFileNotFoundError(
                    f"cannot read config file '{path}': No such file or directory", str(path))
            self._c = _core.config_load(str(path), [])

    @classmethod
    def from_toml(cls, text: str, source: str = "<toml>") -> Config:
        """A config from TOML text; ``source`` prefixes messages (``source:3: ...``)."""
        c = cls.__new__(cls)
        c._c = _core.config_parse(text, source, [])
        return c

    @classmethod
    def _wrap(cls, core_cfg: Any) -> Config:
        c = cls.__new__(cls)
        c._c = core_cfg
        return c

    def set(self, key: str, value: Any) -> Config:
        """Sets one key ("section.key"); returns the config for chaining. A string value is read
        as ``--set`` reads it (``"1e-3"`` is a number for a number key)."""
        return self.update({key: value})

    def update(self, values: Mapping[str, Any]) -> Config:
        """Sets several keys at once (all checked together); returns the config."""
        sets = [f"{k}={_value_text(v)}" for k, v in values.items()]
        self._c = _parse(self.to_toml(), sets)
        return self

    def __getitem__(self, key: str) -> Any:
        section, _, name = key.partition(".")
        d = self.to_dict()
        if section not in d or name not in d[section]:
            raise KeyError(f"{key!r} is not a config key (normlab.Config.keys() lists them)")
        return d[section][name]

    def __setitem__(self, key: str, value: Any) -> None:
        self.set(key, value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Config) and self._c == other._c

    def __repr__(self) -> str:
        return f"normlab.Config({self.to_dict()!r})"

    def copy(self) -> Config:
        return Config(self)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every key, nested by section, enum values as strings (the JSON the CLI writes)."""
        return _json.loads(_core.config_to_json(self._c))

    def to_toml(self) -> str:
        """The full config as TOML, every key present (``normlab train --dump-config``)."""
        return _core.config_to_toml(self._c)

    def save(self, path: PathLike) -> None:
        _Path(path).write_text(self.to_toml())

    @staticmethod
    def keys() -> list[str]:
        """Every valid key as "section.key"."""
        return list(_core.config_keys())


def _as_config(cfg: Config | Mapping[str, Any] | PathLike | None) -> Config:
    return cfg if isinstance(cfg, Config) else Config(cfg)


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
        """One dict per parameter: name, shape, group (embedding, attention, mlp, norm, head)
        and decay (whether AdamW's weight decay applies)."""
        return [{"name": n, "shape": tuple(s), "group": g, "decay": d}
                for n, s, g, d in self._m.param_table()]

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
             step: int | None = None) -> dict[str, Any]:
        """As ``normlab eval``: validation loss, perplexity, bits per byte of the checkpoint on
        its own validation split (or on ``data``): every token once when that fits the budget
        (0 batches, the default; else train.eval_batches), or a sample of ``batches`` batches;
        ``exact``, ``tokens`` and ``sample`` say what was measured (docs/metrics.md)."""
        if data is not None:
            _need(data, f"[data] {data}: no such file or folder")
        return _core.evaluate(str(self._checkpoint(step)), "" if data is None else str(data),
                              batches)

    def generate(self, prompt: str, max_new_tokens: int = 200, temperature: float = 1.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int = 1, ignore_eos: bool = False,
                 step: int | None = None) -> str:
        """As ``normlab generate --prompt``: the text that follows ``prompt`` (the run's
        tokenizer; stops at its end-of-sequence token unless ``ignore_eos``)."""
        return _core.generate_text(str(self._checkpoint(step)), prompt, max_new_tokens,
                                   temperature, top_k, top_p, seed, ignore_eos)


def _check_paths(c: Config, resume: bool) -> None:
    """NotFoundError for a path of the config that does not exist (the trainer would raise a
    FormatError for it)."""
    if c["data.path"]:
        _need(c["data.path"], f"[data] {c['data.path']}: no such file or folder")
    if not resume:  # a resumed run has its own tokenizer and weights
        if c["data.tokenizer"] not in ("", "bytes"):
            _need(c["data.tokenizer"], f"[tokenizer] {c['data.tokenizer']}: cannot open: "
                                       "No such file or directory")
        if c["train.init_from"]:
            _need(c["train.init_from"], f"[checkpoint] {c['train.init_from']} does not exist")


def _warn(c: Config, stacklevel: int) -> None:
    """The warnings `normlab train` prints for this config, as NormlabWarning."""
    for w in _core.config_warnings(c._c):
        _warnings.warn(w, NormlabWarning, stacklevel=stacklevel + 1)


def train(cfg: Config | Mapping[str, Any] | PathLike | None, out: PathLike,
          resume: bool = False,
          callback: Callable[[dict[str, Any]], bool | None] | None = None, *,
          progress: bool | None = None, rewind: bool = False) -> Run:
    """Trains as ``normlab train --out OUT`` (``resume=True``: ``--resume OUT``, with the run's
    saved config when ``cfg`` is None, else ``cfg``, which may change only resumable keys).

    ``callback(record)`` gets every logged step as its metrics.jsonl dict; returning False stops
    the run after that step with a checkpoint (status "interrupted"; resume continues it).
    Ctrl-C stops after the current step, writes the checkpoint, then raises KeyboardInterrupt.

    The warnings the CLI prints (a warmup longer than the run, more threads than cores) are
    raised as ``NormlabWarning``. ``progress``: a tqdm bar over the steps, moved at each logged
    step; by default when tqdm is installed and stderr is a terminal or this is a notebook,
    ``False`` never, ``True`` always (then tqdm must be installed). A path that does not exist
    (``out`` with ``resume=True``, data.path, data.tokenizer, train.init_from) raises
    ``NotFoundError`` before anything starts.

    Resuming a run directory continues from its newest intact checkpoint; each damaged one passed
    over is a ``NormlabWarning``. Resuming from a checkpoint folder older than an intact later one
    rewinds the run (deletes the later checkpoints and metrics records) only with ``rewind=True``,
    as ``--rewind``; otherwise it raises ``InputError`` naming what would be deleted.
    """
    c = None if (resume and cfg is None) else _as_config(cfg)
    start, run_dir = 0, _Path(out)
    if resume:
        _need(out, f"[checkpoint] {out} does not exist")
        d, ckpt, saved, passed_over = _core.resume_point(str(out))
        for bad, why in passed_over:
            _warnings.warn(f"checkpoint {bad} is damaged: {why}; resuming from {ckpt}, the newest "
                           "intact checkpoint", NormlabWarning, stacklevel=2)
        run_dir = _Path(d)
        start = int(_Path(ckpt).name[5:]) if _Path(ckpt).name[5:].isdigit() else 0
        used = c if c is not None else Config._wrap(saved)
    else:
        used = c
    _check_paths(used, resume)
    _warn(used, stacklevel=2)
    steps = used["train.steps"]
    bar = _progress.bar(progress, total=steps, initial=min(start, steps), unit="step",
                        desc=run_dir.name, dynamic_ncols=True)
    hook = callback
    if bar is not None:
        def hook(record: dict[str, Any]) -> bool | None:
            _progress.advance(bar, record["step"])
            if record.get("loss") is not None:
                bar.set_postfix(loss=f"{record['loss']:.4f}", refresh=False)
            return None if callback is None else callback(record)
    try:
        result = _core.train(None if c is None else c._c, str(out), resume, hook, rewind)
        _progress.advance(bar, result["steps"])
    finally:
        if bar is not None:
            bar.close()
    run = Run(run_dir)
    run.result = result
    return run


# -- the lab ----------------------------------------------------------------------------------

def doctor(run: "Run | PathLike") -> dict[str, Any]:
    """As ``normlab doctor RUN_DIR --json``: the diagnosis of a run (docs/doctor.md) from its
    metrics.jsonl and config.toml, as a dict: each instability found with its evidence, remedy and
    what to measure to confirm it, the signals that could not be checked, and the verdict."""
    path = run.path if isinstance(run, Run) else run
    _need(path, f"{path} does not exist (expected a run directory)")
    return _json.loads(_core.doctor(str(path)))


def gradflow(cfg: Config | Mapping[str, Any] | PathLike | None = None, *,
             placements: Iterable[str] = ("post", "pre", "peri"),
             layers: Iterable[int] = (6, 12), inits: Iterable[str] = ("gpt2", "xavier"),
             batches: int = 8, steps: int = 0, out: PathLike | None = None) -> dict[str, Any]:
    """As ``normlab gradflow``: per-layer gradient norms and hidden-state RMS for every
    (placement, depth, init), returned as the gradflow.json dict (written with gradflow.md to
    ``out`` when given)."""
    c = _as_config(cfg)
    return _json.loads(_core.gradflow(c._c, list(placements), [int(x) for x in layers],
                                     list(inits), batches, steps,
                                     "" if out is None else str(out)))


class SweepResult(dict):
    """sweep.json as a dict, plus ``table`` (the sensitivity in Markdown) and ``runs_table``."""

    table: str
    runs_table: str


def _grid_spec(key: str, values: Any) -> str:
    if isinstance(values, str):  # "a:b:Nlog", "a:b:Nlin" or "v1,v2"
        return f"{key}={values}"
    return f"{key}=" + ",".join(_value_text(v) for v in values)


def sweep(cfg: Config | Mapping[str, Any] | PathLike | None, grid: Mapping[str, Any], *,
          out: PathLike = "runs/sweep", jobs: int = 1, lr_key: str = "optim.lr",
          progress: bool | None = None, seeds: int = 1) -> SweepResult:
    """As ``normlab sweep``: trains every point of ``grid`` ({key: [values] or "a:b:Nlog"}) in
    out/NAME (finished points are not redone, interrupted ones resume), ``jobs`` at a time in
    worker processes (cores divided), and returns sweep.json (runs, learning-rate sensitivity).
    Raises Error when runs remain unfinished. ``progress``: a tqdm bar over the runs, as for
    ``train``. ``seeds``: runs per point, seed k with train.seed + k (initialisation and data
    order) in out/NAME_seedK (seed 0: out/NAME), summarized as mean ± std (min–max) over them."""
    base = _as_config(cfg)
    specs = [_grid_spec(k, v) for k, v in grid.items()]
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ConfigError(f"seeds = {seeds!r} must be an integer >= 1",
                          [f"seeds = {seeds!r} must be an integer >= 1"])
    points = _core.sweep_seed_points(specs, seeds)
    threads = max(1, _core.available_cores() // jobs) if jobs > 1 else 0
    cfgs, problems = [], []
    for name, overrides, seed in points:  # every point's config checked before any run starts
        sets = {k: v for k, v in overrides}
        if threads:
            sets["train.threads"] = threads
        try:
            c = base.copy().update(sets)
            if seed:
                c.set("train.seed", c["train.seed"] + seed)
            cfgs.append(c)
        except ConfigError as e:
            problems += [f"{name}: {p}" for p in e.problems]
    if problems:
        raise ConfigError("invalid configuration:" + "".join("\n  " + p for p in problems),
                          problems)
    outp = _Path(out)
    outp.mkdir(parents=True, exist_ok=True)
    todo = [(name, c) for (name, _, _), c in zip(points, cfgs)
            if not _core.sweep_point_finished(str(outp / name))]
    bar = _progress.bar(progress, total=len(points), initial=len(points) - len(todo), unit="run",
                        desc=outp.name, dynamic_ncols=True)
    try:
        if jobs <= 1:
            for name, c in todo:
                if bar is not None:
                    bar.set_postfix_str(name)
                _core.sweep_point(c._c, str(outp / name))
                if bar is not None:
                    bar.update(1)
        else:
            _run_workers(todo, outp, jobs, None if bar is None else lambda: bar.update(1))
    finally:
        if bar is not None:
            bar.close()
    s = _core.sweep_summary(str(outp), specs, lr_key, seeds)
    if s["unfinished"]:
        raise Error(f"sweep incomplete: {len(s['unfinished'])} of {len(points)} runs unfinished: "
                    f"{', '.join(s['unfinished'])}; call sweep() again to continue them")
    result = SweepResult(_json.loads(s["json"]))
    result.table = s["table"]
    result.runs_table = s["runs_table"]
    return result


def _run_workers(todo: list[tuple[str, Config]], out: Path, jobs: int,
                 finished: Callable[[], None] | None) -> None:
    """Each point in its own process (python -m normlab._sweep_worker), ``jobs`` at a time;
    ``finished()`` after each process ends."""
    running: list[_subprocess.Popen] = []
    # The workers import this very package (a build tree's too: abspath keeps its symlinks).
    env = dict(_os.environ)
    here = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    env["PYTHONPATH"] = _os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    try:
        for name, c in todo:
            while len(running) >= jobs:
                still = [p for p in running if p.poll() is None]
                for _ in range(len(running) - len(still)):
                    if finished is not None:
                        finished()
                running = still
                _time.sleep(0.05)
            d = out / name
            d.mkdir(parents=True, exist_ok=True)
            c.save(d / "requested.toml")
            running.append(_subprocess.Popen(
                [_sys.executable, "-m", "normlab._sweep_worker", str(d / "requested.toml"), str(d)],
                env=env))
        for p in running:
            p.wait()
            if finished is not None:
                finished()
    except KeyboardInterrupt:
        for p in running:  # each worker checkpoints its point and exits
            if p.poll() is None:
                p.send_signal(2)
        for p in running:
            p.wait()
        raise


def report(runs: PathLike | Iterable[PathLike], out: PathLike = "report.html", *,
           title: str = "normlab report", smoothing: float = 0.9) -> dict[str, Any]:
    """As ``normlab report``: one HTML page (and an SVG file per figure) of run, sweep and
    gradflow directories. Returns {"html", "figures_dir", "figures", "not_shown", "notes"}."""
    dirs = [runs] if isinstance(runs, (str, _os.PathLike)) else list(runs)
    for d in dirs:
        _need(d, f"report: {d} does not exist")
        if not _Path(d).is_dir():
            raise InputError(f"report: {d} is not a directory")
    return _core.report([str(d) for d in dirs], str(out), title, smoothing)


def set_num_threads(n: int) -> int:
    """Threads of normlab's pool (n <= 0: all available cores, the CLI's default). Returns the
    count in effect. A training run sets it from train.threads."""
    return _core.set_num_threads(n)


def get_num_threads() -> int:
    return _core.get_num_threads()


del annotations  # the __future__ import's name: not part of the API
