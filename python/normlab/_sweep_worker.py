"""Worker of normlab.sweep(jobs > 1): trains one grid point in its own process, as the CLI's
`normlab sweep-point` does. Usage: python -m normlab._sweep_worker CONFIG.toml RUN_DIR"""
from __future__ import annotations

import sys

from . import Config, _core


def main() -> int:
    cfg_path, run_dir = sys.argv[1], sys.argv[2]
    try:
        _core.sweep_point(Config(cfg_path)._c, run_dir)
    except KeyboardInterrupt:  # the point was checkpointed; a rerun of the sweep resumes it
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
