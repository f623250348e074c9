"""normlab's exceptions as Python classes. The C++ library throws typed errors
(include/normlab/errors.h); the extension raises these with the same message the CLI prints."""
from __future__ import annotations

import errno


class Error(Exception):
    """Base of every error normlab raises on purpose."""


class ConfigError(Error, ValueError):
    """One or more invalid configuration values; ``problems`` holds one line per problem (every
    problem at once, with the nearest valid key for a misspelt one)."""

    problems: list[str]

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = list(problems or [])


class InputError(Error, ValueError):
    """Input data out of range for the model: a token id outside the vocabulary, a batch or
    sequence longer than the model takes, a tokens array of the wrong shape."""


class FormatError(Error, ValueError):
    """A file that cannot be read, is truncated or malformed, or is not what was asked for (a
    checkpoint folder without a checkpoint, a safetensors file with other tensors)."""


class InternalError(Error, RuntimeError):
    """A broken invariant inside normlab: a bug, never the caller's fault."""


class NotFoundError(FormatError, FileNotFoundError):
    """A path that does not exist: a config file, a run directory, a checkpoint, a data or
    tokenizer file. Both a ``FormatError`` (what normlab raised for it before) and a
    ``FileNotFoundError`` (``errno`` is ENOENT, ``filename`` the path), so ``except
    FileNotFoundError`` catches it as it would catch ``open()``'s."""

    def __init__(self, message: str, filename: str | None = None) -> None:
        super().__init__(message)
        self.errno = errno.ENOENT
        self.strerror = message
        self.filename = filename

    def __str__(self) -> str:  # the message alone, as the CLI prints it (not "[Errno 2] ...")
        return str(self.args[0]) if self.args else ""

    def __reduce__(self) -> tuple[type, tuple[str, str | None]]:
        return type(self), (str(self), self.filename)


class NormlabWarning(UserWarning):
    """A setting that is valid but probably not what was meant (a warmup longer than the run,
    more threads than cores): the warnings ``normlab train`` prints, raised with
    ``warnings.warn`` (filter them with ``warnings.simplefilter(..., normlab.NormlabWarning)``)."""


class ConfigFileNotFoundError(NotFoundError, ConfigError):
    """A config file that does not exist: a ``NotFoundError`` (so a ``FileNotFoundError``) and,
    as normlab raised for it before, a ``ConfigError``."""

    def __init__(self, message: str, filename: str | None = None) -> None:
        super().__init__(message, filename)
        self.problems = [message]
