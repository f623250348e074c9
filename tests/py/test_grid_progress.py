"""`normlab compare` and `normlab sweep` on a pipe (as in CI or `| tee`): each run's progress
(its step/total, loss, ETA) at the log interval, the grid's (runs done/total, elapsed, ETA) when a
run ends; and the summaries (compare's summary.md, sweep's sensitivity.md) start with how they
were made: the command line, normlab's version, the date, the CPU and the config."""
import datetime
import os
import pathlib
import re
import tomllib

from normlab_cli import normlab

TINY = ["--set", "model.n_layer=1", "--set", "model.d_model=16", "--set", "model.n_head=2",
        "--set", "model.d_ff=32", "--set", "model.seq_len=16", "--set", "train.batch_size=2",
        "--set", "train.eval_batches=1", "--set", "train.log_interval=2", "--set", "train.threads=1",
        "--set", "train.steps=6"]

ROOT = pathlib.Path(__file__).resolve().parents[2]
# A run's line: "[NAME] step      4/6 | loss 5.5323 | lr ... | ETA 0m00s".
RUN_LINE = r"^\[{}\] step +{}/6 \| loss \d+\.\d{{4}} \|.*\| ETA (\d+m\d\ds|\?)"
GRID_LINE = r"^grid: {}/2 runs done \| elapsed \d+m\d\ds"
ETA = r" \| ETA \d+m\d\ds$"


def assert_run_progress(out, names):
    for name in names:
        for step in (2, 4, 6):  # train.log_interval = 2
            assert re.search(RUN_LINE.format(re.escape(name), step), out, re.M), (name, step, out)


def test_compare_prints_progress_per_run_and_for_the_grid(tmp_path):
    p = normlab("compare", *TINY, "--placements", "post,pre", "--out", tmp_path / "c", check=0)
    assert_run_progress(p.stdout, ["post", "pre"])
    # After the first run the grid estimates the second's 6 steps; after the last, nothing is left.
    first = re.search(GRID_LINE.format(1) + ETA, p.stdout, re.M)
    last = re.search(GRID_LINE.format(2) + "$", p.stdout, re.M)
    assert first and last, p.stdout
    assert p.stdout.index("[post] step      6/6") < first.start() < p.stdout.index("[pre] step      2/6")


def test_sweep_prints_progress_per_run_and_for_the_grid(tmp_path):
    p = normlab("sweep", *TINY, "--grid", "optim.lr=1e-3,3e-3", "--out", tmp_path / "s", check=0)
    assert_run_progress(p.stdout, ["lr-1e-3", "lr-3e-3"])
    assert re.search(GRID_LINE.format(1) + ETA, p.stdout, re.M), p.stdout
    assert re.search(GRID_LINE.format(2) + "$", p.stdout, re.M), p.stdout


def test_parallel_sweep_shows_the_workers_progress(tmp_path):
    """With -j 2 the runs train in worker processes: their steps come from each run's
    metrics.jsonl as the worker writes it."""
    p = normlab("sweep", *TINY, "--grid", "optim.lr=1e-3,3e-3", "--out", tmp_path / "s", "-j", "2",
                check=0)
    assert_run_progress(p.stdout, ["lr-1e-3", "lr-3e-3"])
    assert re.search(GRID_LINE.format(1), p.stdout, re.M), p.stdout
    assert re.search(GRID_LINE.format(2) + "$", p.stdout, re.M), p.stdout


def cpu_model_name():
    for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def check_header(text, title, args, table):
    lines = text.splitlines()
    assert lines[0] == f"# {title}", text[:500]
    head = "\n".join(lines[:8])
    # The command line, as the shell took it.
    command = re.search(r"^- command: `(.*)`$", head, re.M)
    assert command and command.group(1).endswith(" ".join(map(str, args))), head
    assert command.group(1).split()[1] == title.split()[1]
    # The version: CMake's project(VERSION), which --version prints too.
    version = re.search(r"^project\(normlab VERSION (\S+)", (ROOT / "CMakeLists.txt").read_text(), re.M)
    assert f"\n- normlab: {version.group(1)}\n" in head, head
    assert normlab("--version", check=0).stdout.startswith(f"normlab {version.group(1)}")
    date = re.search(r"^- date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC$", head, re.M)
    assert date, head
    when = datetime.datetime.strptime(date.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=datetime.timezone.utc)
    assert abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) < 3600
    cpu = re.search(r"^- CPU: (.*) \((\d+) cores available; (\d+) threads? per run", head, re.M)
    assert cpu and cpu.group(1) == cpu_model_name(), head
    assert int(cpu.group(2)) >= 1 and int(cpu.group(3)) == 1  # train.threads=1
    config = re.search(r"^- config: built-in defaults; overrides: (.*)$", head, re.M)
    assert config, head
    assert config.group(1).split(", ") == TINY[1::2], head
    # Every key as resolved, TOML in a fenced block.
    block = re.search(r"```toml\n(.*?)\n```", text, re.S)
    assert block and block.end() < text.index(table), text[:500]
    cfg = tomllib.loads(block.group(1))
    assert cfg["model"]["d_model"] == 16 and cfg["train"]["steps"] == 6
    assert cfg["model"]["norm"] and cfg["optim"]["lr"] > 0  # keys that were not set, too


def test_compare_summary_starts_with_how_it_was_made(tmp_path):
    out = tmp_path / "c"
    args = ["compare", *TINY, "--placements", "post,pre", "--out", out]
    normlab(*args, check=0)
    text = (out / "summary.md").read_text()
    check_header(text, "normlab compare", args, "| placement |")
    assert "| post | done | 6 |" in text and "| pre | done | 6 |" in text


def test_sweep_summary_starts_with_how_it_was_made(tmp_path):
    out = tmp_path / "s"
    args = ["sweep", *TINY, "--grid", "optim.lr=1e-3,3e-3", "--out", out]
    normlab(*args, check=0)
    text = (out / "sensitivity.md").read_text()
    check_header(text, "normlab sweep", args, "| run |")
    assert "| lr-1e-3 | done | 6 |" in text and "LR sensitivity" in text


def test_on_a_terminal_the_lines_are_redrawn_in_place(tmp_path):
    """Under a pseudo-terminal (80 columns): the run's line and the grid's are redrawn (cursor up,
    clear to the end of the screen), in the short form that fits, step/total, loss and ETA first."""
    import pty
    import subprocess
    exe = pathlib.Path(os.environ["NORMLAB_BUILD_DIR"]) / "normlab"
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(exe), "compare", *TINY, "--placements", "post,pre", "--out",
                             str(tmp_path / "c")], stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, raw.decode(errors="replace")
    out = raw.decode(errors="replace")
    assert "\r\x1b[1A\x1b[J" in out, out  # up over the run's line, then redrawn
    assert re.search(r"\[pre\] step 4/6 \| loss \d+\.\d{4} \| ETA \d+m\d\ds \| \d+ tok/s\r\ngrid: 1/2 runs done \| "
                     r"elapsed \d+m\d\ds", out), out
    drawn = re.split(r"\r\n|\r|\x1b\[\d*A|\x1b\[J", out[:out.index("| placement |")])
    redrawn = [l for l in drawn if l.startswith(("[", "grid:"))]  # permanent lines may wrap
    assert redrawn and max(map(len, redrawn)) <= 79, max(redrawn, key=len)
