"""Runs the built `normlab` executable for the end-to-end tests in this folder (ctest sets
NORMLAB_BUILD_DIR to the build tree)."""
import os
import pathlib
import subprocess

import pytest

BUILD = os.environ.get("NORMLAB_BUILD_DIR")


def normlab(*args, check=None, timeout=300, cwd=None):
    """`normlab ARGS...` with captured text output (run in `cwd` when given); with `check`,
    asserts that exit status."""
    if not BUILD:
        pytest.fail("NORMLAB_BUILD_DIR is not set (ctest sets it)")
    exe = pathlib.Path(BUILD) / "normlab"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first")
    p = subprocess.run([str(pathlib.Path(exe).resolve()), *map(str, args)], capture_output=True,
                       text=True, errors="replace", timeout=timeout, cwd=cwd)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p
