"""Learning-rate sensitivity of Post-, Pre- and Peri-Norm (Wortsman et al. 2023) on a small model,
from Python: a sweep of placement x learning rate, its sensitivity table, and a figure when
matplotlib is installed. About 2 minutes on 2 cores (docs/python.md shows its output).

    python examples/placement_study.py [OUT_DIR]      # default runs/placement_study
"""
import sys

import normlab

out = sys.argv[1] if len(sys.argv) > 1 else "runs/placement_study"
cfg = normlab.Config({"model": {"n_layer": 2, "d_model": 64, "n_head": 4, "d_ff": 256, "seq_len": 64},
                      "optim": {"warmup_steps": 10},
                      "train": {"steps": 200, "batch_size": 8, "eval_interval": 200,
                                "log_interval": 20, "checkpoint_interval": 1000}})
grid = {"model.placement": ["post", "pre", "peri"], "optim.lr": "3e-3:3e-1:3log"}
result = normlab.sweep(cfg, grid, out=out, jobs=2)
print(result.table)
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
for s in result["sensitivity"]:
    losses = [float("nan") if x is None else x for x in s["final_losses"]]
    plt.semilogx(s["lrs"], losses, marker="o", label=f"{s['label']} ({s['sensitivity']:.3f})")
plt.xlabel("learning rate")
plt.ylabel("final validation loss")
plt.legend(title="placement (LR sensitivity)")
plt.savefig(f"{out}/placement_lr.png", dpi=120)
print(f"figure: {out}/placement_lr.png")
