"""normlab's exceptions as Python classes. The C++ library throws typed errors
(include/normlab/errors.h); the extension raises these with the same message the CLI prints."""
from __future__ import annotations


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
