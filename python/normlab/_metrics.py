"""Run.metrics: the step records of metrics.jsonl as a list of dicts that also reads as columns
of numpy arrays (docs/python.md, "Training and runs"; the fields are those of docs/metrics.md)."""
from __future__ import annotations

from typing import Any

import numpy as np


def _column(values: list[Any]) -> Any:
    """One field over the records as an array of len(values) rows; None (the field absent from a
    record, or a non-finite number, which metrics.jsonl writes as null) becomes NaN. Integer and
    boolean fields keep their dtype when no row lacks them; an object field (group -> number)
    becomes a dict of such columns."""
    present = [v for v in values if v is not None]
    if not present:
        return np.full(len(values), np.nan)
    if all(isinstance(v, dict) for v in present):
        names = list(dict.fromkeys(k for v in present for k in v))
        return {k: _column([v.get(k) if isinstance(v, dict) else None for v in values])
                for k in names}
    if all(isinstance(v, list) for v in present):
        rows = [np.array(v, dtype=np.float64) for v in present]  # null inside an array: NaN
        shape = rows[0].shape
        if any(r.shape != shape for r in rows):
            out = np.empty(len(values), dtype=object)
            it = iter(rows)
            for i, v in enumerate(values):
                out[i] = None if v is None else next(it)
            return out
        out = np.full((len(values), *shape), np.nan)
        it = iter(rows)
        for i, v in enumerate(values):
            if v is not None:
                out[i] = next(it)
        return out
    if all(isinstance(v, str) for v in present):
        return np.array(values, dtype=object)
    complete = len(present) == len(values)
    if complete and all(isinstance(v, bool) for v in values):
        return np.array(values, dtype=bool)
    if complete and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return np.array(values, dtype=np.int64)
    return np.array([np.nan if v is None else float(v) for v in values], dtype=np.float64)


class Metrics(list):
    """The step records of a run's metrics.jsonl, in file order: a list of dicts (``metrics[-1]``
    is the last logged step as its JSON line says it, non-finite values as None) that also reads
    as columns: ``metrics["loss"]`` is a numpy array with one entry per record, aligned with
    ``metrics["step"]``. A record without the field (``val_loss`` between evaluations) or with a
    null (a non-finite loss) gives NaN there; ``series(name)`` drops those rows instead.
    Per-layer fields are (records, L) arrays, per-group fields dicts of columns."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            if not any(key in r for r in self):
                have = ", ".join(self.keys()) or "none: no steps logged"
                raise KeyError(f"{key!r}: no step record of this run has it (fields: {have})")
            return _column([r.get(key) for r in self])
        out = super().__getitem__(key)
        return Metrics(out) if isinstance(key, slice) else out

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            return any(key in r for r in self)
        return super().__contains__(key)

    def keys(self) -> list[str]:
        """The fields of the records, in the order they first appear (so ``dict(metrics)`` is
        {field: column})."""
        return list(dict.fromkeys(k for r in self for k in r))

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of the records that hold ``key`` with a value (not null): for a
        field written on some steps only, e.g. ``plt.plot(*run.metrics.series("val_loss"))``."""
        col = self[key]
        if isinstance(col, dict):
            raise TypeError(f"{key!r} holds one value per group: take series of one group")
        keep = np.array([r.get(key) is not None for r in self], dtype=bool)
        return self["step"][keep], col[keep]

    def to_pandas(self) -> Any:
        """A pandas DataFrame, one row per record and one column per field (NaN where a record
        lacks the field, as the numpy columns). Needs pandas, an optional dependency."""
        try:
            import pandas as pd
        except ImportError as e:
            raise ImportError("Run.metrics.to_pandas() needs pandas, which is not installed: "
                              "pip install pandas (or pip install 'normlab[pandas]')") from e
        return pd.DataFrame(list(self))
