"""normlab.Config: a typed config from a TOML file, a dict or the defaults (docs/python.md)."""
from __future__ import annotations

import json as _json
import os as _os
import re as _re
from collections.abc import Mapping as _Mapping
from pathlib import Path as _Path
from typing import TYPE_CHECKING as _TYPE_CHECKING

import numpy as _np

from . import _core
from ._errors import ConfigError
from ._errors import ConfigFileNotFoundError as _ConfigFileNotFoundError
from ._errors import NotFoundError

if _TYPE_CHECKING:  # names of the annotations only: the module's namespace holds the API alone
    import os
    from collections.abc import Callable, Iterable, Mapping
    from pathlib import Path
    from typing import Any, Union

    import numpy as np

    PathLike = Union[str, os.PathLike]


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
    if isinstance(value, (list, tuple)):  # a TOML array of strings (source.unknown)
        return _json.dumps([_plain(v) for v in value])
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


def _dotted(mapping: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    """("section.key", value) of a nested mapping: {"optim": {"soap": {"shampoo_beta": 0.9}}}
    and {"optim": {"soap.shampoo_beta": 0.9}} both give ("optim.soap.shampoo_beta", 0.9)."""
    out: list[tuple[str, Any]] = []
    for k, v in mapping.items():
        if isinstance(v, _Mapping):
            out += _dotted(v, f"{prefix}{k}.")
        else:
            out.append((f"{prefix}{k}", v))
    return out


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
            # Every key as an override of the defaults (not of base's full TOML), so that the
            # defaults one key implies (model.placement = ngpt: no weight decay, no warmup) see
            # which keys were set, as they do from the CLI.
            del base
            nested_flat = [f"{k}={_value_text(v)}" for k, v in _dotted(nested)]
            self._c = _parse("", nested_flat + flat)
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
        # A dotted section nests: "optim.soap.shampoo_beta" is to_dict()["optim"]["soap"][...].
        at: Any = self.to_dict()
        for part in key.split("."):
            if not isinstance(at, dict) or part not in at:
                raise KeyError(f"{key!r} is not a config key (normlab.Config.keys() lists them)")
            at = at[part]
        if isinstance(at, dict) or "." not in key:
            raise KeyError(f"{key!r} is not a config key (normlab.Config.keys() lists them)")
        return at

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
