"""Progress bars of normlab.train and normlab.sweep, drawn by tqdm (an optional dependency) when
it is installed and the output is a terminal or a notebook; ``progress=False`` turns them off,
``progress=True`` asks for one wherever the output goes (it then needs tqdm)."""
from __future__ import annotations

import sys
from typing import Any


def _interactive() -> bool:
    """Whether a person watches: stderr is a terminal, or this is a Jupyter/IPython kernel."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):  # a replaced or closed stream
        pass
    return "ipykernel" in sys.modules


def bar(progress: bool | None, **kwargs: Any) -> Any:
    """A tqdm.auto bar made with ``kwargs``, or None when there is to be none (``progress`` None:
    only if tqdm is installed and ``_interactive()``)."""
    if progress is False or (progress is None and not _interactive()):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        if progress:
            raise ImportError("progress=True needs tqdm, which is not installed: pip install tqdm "
                              "(or pip install 'normlab[progress]')") from None
        return None
    return tqdm(**kwargs)


def advance(b: Any, n: int) -> None:
    """Moves the bar to position ``n`` (never back)."""
    if b is not None and n > b.n:
        b.update(n - b.n)
