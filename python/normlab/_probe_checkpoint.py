"""Checkpoints of a probed run (docs/python.md, "Checkpoints of a probed run").

``probe.save_checkpoint(state)`` writes RUN/checkpoints/step_NNNNNNNN/ (the folder name normlab's
own checkpoints use) holding ``state.pt`` (whatever the loop passes: model, optimizer and scheduler
state dicts, RNG states) and ``probe_checkpoint.json``: the step, each file's size and SHA-256, and
the probe's own state (token count, the spike test's window, the recent losses, the learning rates
seen), so that a run resumed with ``Probe(..., resume_from=FOLDER)`` writes the records the
straight run would have written. ``normlab doctor --confirm --command "... {resume_from}"`` starts
its arms at such a folder: doctor counts it intact when every listed file has its recorded size.
The folder is written under a temporary name and renamed when complete, as normlab's are.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch

MANIFEST = "probe_checkpoint.json"
STATE = "state.pt"
FORMAT = "normlab.torch probe checkpoint 1"


def step_folder(out: Path, step: int) -> Path:
    return out / "checkpoints" / f"step_{step:08d}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def save(out: Path, step: int, state: Any, probe_state: dict[str, Any]) -> Path:
    """Writes the checkpoint folder of ``step`` atomically and returns it."""
    final = step_folder(out, step)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(state, tmp / STATE)
    manifest = {"format": FORMAT, "step": step,
                "files": {STATE: {"bytes": (tmp / STATE).stat().st_size,
                                  "sha256": _sha256(tmp / STATE)}},
                "probe": probe_state}
    with open(tmp / MANIFEST, "w", encoding="utf-8") as f:
        f.write(json.dumps(manifest, allow_nan=False) + "\n")
        f.flush()
        os.fsync(f.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    (final.parent / "latest").write_text(final.name + "\n", encoding="utf-8")
    return final


def read_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """The folder's manifest, its files checked (size and SHA-256); ValueError naming what is
    wrong otherwise."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"{folder} is not a probed run's checkpoint: it has no {MANIFEST} "
                         "(written by normlab.torch.Probe.save_checkpoint)")
    try:
        m = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path} is damaged: {e}") from e
    if not isinstance(m, dict) or m.get("format") != FORMAT or not isinstance(m.get("step"), int):
        raise ValueError(f"{path} is not a {FORMAT!r} manifest")
    for name, want in m.get("files", {}).items():
        f = folder / name
        if not f.is_file():
            raise ValueError(f"checkpoint {folder} is damaged: {name} is missing")
        if f.stat().st_size != want["bytes"]:
            raise ValueError(f"checkpoint {folder} is damaged: {name} has {f.stat().st_size} "
                             f"bytes, the manifest says {want['bytes']}")
        if _sha256(f) != want["sha256"]:
            raise ValueError(f"checkpoint {folder} is damaged: {name}'s SHA-256 differs from "
                             "the manifest's")
    return m


def load_checkpoint(folder: str | os.PathLike, *, weights_only: bool = True,
                    map_location: Any = None) -> Any:
    """The state a probed run saved with ``probe.save_checkpoint(state)`` in ``folder``
    (RUN/checkpoints/step_N), after checking its files against the manifest.
    ``weights_only``/``map_location`` go to ``torch.load``."""
    read_manifest(folder)
    return torch.load(Path(folder) / STATE, weights_only=weights_only, map_location=map_location)


def records_before(folder: Path, step: int) -> list[str]:
    """The metrics lines of the checkpoint's run up to its step (its end event left out): the
    history a resumed run continues."""
    path = folder.parent.parent / "metrics.jsonl"
    if not path.is_file():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        if r.get("event") == "end" or r.get("step", 0) > step:
            continue
        out.append(line)
    return out
