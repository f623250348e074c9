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
import subprocess as _subprocess
import sys as _sys
import time as _time
import warnings as _warnings
from pathlib import Path as _Path
from typing import TYPE_CHECKING as _TYPE_CHECKING

from . import _core, _progress
from ._errors import ConfigError, Error, FormatError, InputError, InternalError, NormlabWarning
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
    "Config", "Model", "Optimizer", "Run", "Metrics", "SweepResult", "train", "doctor", "gradflow",
    "coordcheck", "sweep",
    "report", "set_num_threads", "get_num_threads", "Error", "ConfigError", "InputError",
    "FormatError", "NotFoundError", "InternalError", "NormlabWarning", "__version__",
]


# Config (_config.py), Model and Run (_model.py) are defined in their own modules.
from ._config import Config, _as_config, _need, _value_text  # noqa: E402
from ._model import Model, Run  # noqa: E402,F401
from ._optimizer import Optimizer  # noqa: E402,F401


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

def doctor(run: "Run | PathLike", *, confirm: bool = False, seeds: int = 3, jobs: int = 1,
           max_steps: int = 0, dry_run: bool = False, command: str = "") -> dict[str, Any]:
    """As ``normlab doctor RUN_DIR --json``: the diagnosis of a run (docs/doctor.md) from its
    metrics.jsonl and config.toml, as a dict: each instability found with its evidence, its
    remedies (``{"text", "set", "tried"}``: the config changes, and whether the run already has
    them), the statistic that named it, and what to measure to confirm it; the checks performed
    (``checked``) and those that could not be, with why (``not_checked``); and the verdict.

    ``confirm=True`` (``doctor --confirm``): tests each remedy against a control, replaying the run
    with and without it over ``seeds`` data orders (arms in RUN/confirm/fromS_toE/, ``jobs`` at a
    time, the window capped at ``max_steps`` when > 0), and adds a "confirmation" per problem
    (start step, window, arms, the statistic per arm and seed, verdicts; docs/doctor.md,
    "Confirming a remedy"). ``dry_run=True`` returns the plan alone without training. A rerun
    resumes the arms.

    ``command`` (``--command``, for a probed PyTorch run): each arm is trained by running this
    template through ``/bin/sh`` (``sweep --command``'s placeholders ``{KEY}`` and ``{out}``, plus
    ``{seed}`` and ``{resume_from}``; the output goes to the arm's command.log); a remedy the
    template cannot express is "cannot confirm"."""
    path = run.path if isinstance(run, Run) else run
    _need(path, f"{path} does not exist (expected a run directory)")
    if not confirm and not dry_run:
        return _json.loads(_core.doctor(str(path)))
    for name, v, low in (("seeds", seeds, 1), ("jobs", jobs, 1), ("max_steps", max_steps, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise ConfigError(f"{name} = {v!r} must be an integer >= {low}",
                              [f"{name} = {v!r} must be an integer >= {low}"])
    if not isinstance(command, str):
        raise ConfigError(f"command = {command!r} must be a string",
                          [f"command = {command!r} must be a string"])
    args = (str(path), seeds, jobs, max_steps, command)
    if dry_run:
        return _json.loads(_core.confirm_stage(args[0], "plan", *args[1:]))
    by_job: dict[str, list[tuple[str, Config]]] = {}
    lines: list[tuple[str, str]] = []
    for out, name, requested, line in _json.loads(
            _core.confirm_stage(args[0], "prepare", *args[1:])):
        if _core.sweep_point_finished(str(_Path(out) / name)):
            continue
        if command:
            lines.append((str(_Path(out) / name), line))
        else:
            by_job.setdefault(out, []).append((name, Config(requested)))
    if lines:
        _run_commands(lines, jobs)
    for out, todo in by_job.items():
        if jobs <= 1:
            for name, c in todo:
                _core.sweep_point(c._c, str(_Path(out) / name))
        else:
            _run_workers(todo, _Path(out), jobs, None)
    return _json.loads(_core.confirm_stage(args[0], "finish", *args[1:]))


def _run_commands(lines: list[tuple[str, str]], jobs: int) -> None:
    """Runs each (arm directory, command line) through /bin/sh, ``jobs`` at a time, its output in
    the directory's command.log, and judges the run it wrote: the C++ runner ``sweep --command``
    uses (lab/external_command.h), which releases the GIL while the command runs."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
        list(ex.map(lambda item: _core.run_external_point(item[1], item[0]), lines))


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


def coordcheck(cfg: Config | Mapping[str, Any] | PathLike | None = None, *,
               widths: Iterable[int] = (64, 128, 256, 512),
               parametrizations: Iterable[str] = ("standard", "mup"), steps: int = 5,
               seeds: int = 3, out: PathLike | None = None) -> dict[str, Any]:
    """As ``normlab coordcheck``: trains the config at every width (d_model; d_ff and the
    attention widths scale with it) under each parametrization for ``steps`` steps at optim.lr,
    ``seeds`` initialisations on the same batches, and returns coordcheck.json as a dict:
    ``curves`` (per parametrization and width: ``rms[activation]`` per step, 0 = at
    initialisation, and ``loss``) and ``slopes[parametrization][activation]`` per step (the slope
    of log2 RMS on log2 width: 0 flat, 1 proportional). Written with coordcheck.md and
    coordcheck.svg to ``out`` when given."""
    c = _as_config(cfg)
    return _json.loads(_core.coordcheck(c._c, [int(w) for w in widths], list(parametrizations),
                                        int(steps), int(seeds), "" if out is None else str(out)))


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
