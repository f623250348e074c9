"""Runs the built `normlab` executable for the end-to-end tests in this folder (ctest sets
NORMLAB_BUILD_DIR to the build tree)."""
import os
import pathlib
import subprocess

import pytest

BUILD = os.environ.get("NORMLAB_BUILD_DIR")


def normlab(*args, check=None, timeout=300):
    """`normlab ARGS...` with captured text output; with `check`, asserts that exit status."""
    if not BUILD:
        pytest.fail("NORMLAB_BUILD_DIR is not set (ctest sets it)")
    exe = pathlib.Path(BUILD) / "normlab"
    if not exe.exists():
        pytest.fail(f"{exe} does not exist: build first")
    p = subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, errors="replace",
                       timeout=timeout)
    if check is not None:
        assert p.returncode == check, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p
