"""Imports the Python package `normlab` from the build tree for the test_python_*.py files: the
extension and links to python/normlab/*.py live in $NORMLAB_BUILD_DIR/python/normlab (built with
-DNORMLAB_PYTHON=ON, as scripts/test.sh does). Also tiny configs shared by those tests."""
import os
import pathlib
import sys

import pytest

BUILD = os.environ.get("NORMLAB_BUILD_DIR")
if not BUILD:
    pytest.fail("NORMLAB_BUILD_DIR is not set (ctest sets it)", pytrace=False)
PKG = pathlib.Path(BUILD) / "python"
if not list((PKG / "normlab").glob("_core*.so")):
    pytest.fail(f"no normlab._core extension in {PKG / 'normlab'}: configure with "
                "-DNORMLAB_PYTHON=ON and build the target normlab_python", pytrace=False)
sys.path.insert(0, str(PKG))

import normlab  # noqa: E402

# A model small enough that every call takes milliseconds.
TINY_MODEL = {"vocab_size": 32, "n_layer": 2, "d_model": 16, "n_head": 2, "d_ff": 32,
              "seq_len": 8}
# A training run on the embedded corpus (byte tokenizer) that takes well under a second per step.
TINY_RUN = {"model": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_ff": 32, "seq_len": 16},
            "optim": {"warmup_steps": 2},
            "train": {"steps": 6, "batch_size": 2, "log_interval": 1, "eval_interval": 3,
                      "eval_batches": 1, "checkpoint_interval": 100, "threads": 1}}

# The same run as `--set` options for the CLI.
TINY_RUN_SETS = [f"--set={s}.{k}={v}" for s, kv in TINY_RUN.items() for k, v in kv.items()]
