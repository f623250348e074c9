"""Turns the JSON results of bench/run.sh into the table it prints and docs/benchmarks.md.

    python3 bench/report.py build/bench-results --out docs/benchmarks.md --command "bench/run.sh"
    python3 bench/report.py --per-cpu-only --out docs/benchmarks.md   # only "Results per CPU"

Medians over rounds; every number in the run's sections comes from this run's files. The run's
summary also goes to the per-CPU store (--store, default bench/results/<cpu key>.json, one file per
CPU, replacing that CPU's earlier file; --no-store skips writing), and the report opens with one
table per stored CPU ("Results per CPU"). The CPU is read from the results' cpu.json
(bench/cpuinfo.py, written by run.sh), or from the machine the report runs on when there is none.
bench/notes.md (hand-written: the FLOP definition, what made the difference, the profile behind any
missed target) is appended as it is.

The parts: report_runs.py reads the results into rows, report_store.py keeps the per-CPU store,
report_per_cpu.py writes "Results per CPU" and report_latest.py the latest run's sections.
"""
from __future__ import annotations

import argparse
import datetime
import glob
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report_latest import kept_sections, run_sections  # noqa: E402  (bench/report_*.py)
from report_per_cpu import (INTRO, TITLE, per_cpu_section, per_cpu_table,  # noqa: E402
                            splice_per_cpu)
from report_runs import compute_rows, load, load_cpu  # noqa: E402
from report_store import STORE_DEFAULT, read_store, supersedes, summarise, write_store  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="?", help="bench/run.sh's results directory")
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", default="bench/run.sh")
    ap.add_argument("--configs", nargs="*", default=["a", "b", "c", "c_matched"])
    ap.add_argument("--store", default=STORE_DEFAULT,
                    help="the per-CPU result files (<cpu key>.json); default bench/results")
    ap.add_argument("--no-store", action="store_true",
                    help="do not write this run's per-CPU file (the report still lists it)")
    ap.add_argument("--per-cpu-only", action="store_true",
                    help="only rewrite the report's \"Results per CPU\" section from the store")
    a = ap.parse_args()

    if a.per_cpu_only:
        section = per_cpu_section([rec for _, rec in read_store(a.store)])
        text = open(a.out).read() if os.path.exists(a.out) else TITLE
        with open(a.out, "w") as f:
            f.write(splice_per_cpu(text, section))
        print(f"wrote the per-CPU section of {a.out}")
        return 0
    if not a.results:
        ap.error("the results directory is required (or --per-cpu-only)")

    runs = load(a.results)
    rounds = max((len(v) for v in runs.values()), default=0)
    rows, details = compute_rows(runs, a.configs)
    cpu, cpu_source = load_cpu(a.results)
    torch_v = next((x.get("torch") for (kind, _), v in sorted(runs.items())
                    if kind in ("eager", "compile", "autocast", "autocast_compile") for x in v
                    if x.get("torch")), None)
    threads = next((x.get("threads") for (kind, _), v in sorted(runs.items())
                    if kind == "normlab" for x in v if x.get("threads")), None)
    stamps = [os.path.getmtime(f) for f in glob.glob(os.path.join(a.results, "*.json"))]
    span = (datetime.datetime.fromtimestamp(min(stamps)), datetime.datetime.fromtimestamp(max(stamps))) \
        if stamps else (datetime.datetime.now(),) * 2
    now = f"{span[0]:%Y-%m-%d %H:%M} to {span[1]:%H:%M}"

    record = {"cpu": cpu, "span": {"start": f"{span[0]:%Y-%m-%d %H:%M}",
                                   "end": f"{span[1]:%Y-%m-%d %H:%M}"},
              "command": a.command, "rounds": rounds, "threads": threads, "torch": torch_v,
              "configs": summarise(rows)}
    if a.no_store:
        stored = read_store(a.store) if os.path.isdir(a.store) else []
        records = [rec for _, rec in stored if not supersedes(record, rec)] + [record]
    else:
        path = write_store(a.store, record)
        print(f"wrote {path}", file=sys.stderr)
        records = [rec for _, rec in read_store(a.store)]

    out = [TITLE, INTRO, per_cpu_section(records)]
    sections, table = run_sections(rows, details, runs, cpu, cpu_source, a.command, now, rounds,
                                   torch_v or "n/a")
    out += sections
    out += kept_sections(a.out)
    notes = os.path.join(os.path.dirname(os.path.abspath(__file__)), "notes.md")
    if os.path.exists(notes):
        with open(notes) as f:
            out.append(f.read())
    text = "\n".join(out).rstrip() + "\n"
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        f.write(text)
    print(table)
    print()
    print(per_cpu_table(record))
    print(f"\nwrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
