"""Tokenizer benchmark (issue 13; not named tokenizers.py, which would shadow the package): on the same text in one run, BPE training time of normlab
against the `tokenizers` package's BpeTrainer (same GPT-2 pre-tokenization, same vocabulary size),
and encode throughput (MB/s) of normlab, `tokenizers` and `tiktoken` with the vocabulary normlab
trained, single-threaded and with threads. Writes the section "## Tokenizers" of
docs/benchmarks.md (replacing it, or inserting it before "## Definitions").

    python bench/tokenizer_bench.py --normlab build/normlab [--out docs/benchmarks.md]

Every implementation runs in a fresh process per measurement (thread counts are fixed at start:
RAYON_NUM_THREADS for tokenizers, num_threads for tiktoken, --threads for normlab); the best of
--repeat encodes of all lines counts, and the table shows the median over --rounds rounds.
tiktoken's Encoding is built from the trained vocabulary (mergeable ranks = the vocabulary ids of
the byte strings, GPT-2's pattern); nothing is downloaded.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def byte_decoder():
    """ByteLevel character -> byte (GPT-2's mapping: printable bytes stand for themselves)."""
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


# --- worker modes: one measurement each, one JSON line on stdout ---------------------------------

def worker_train_hf(a):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    text = pathlib.Path(a.data).read_text(encoding="utf-8")
    # One sequence per line, newline kept: the same pre-tokens as the whole document (a lone "\n"
    # before a non-space is its own pre-token either way) and work the trainer can spread.
    seqs = text.splitlines(keepends=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=a.vocab_size, min_frequency=2, show_progress=False,
                             special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t0 = time.perf_counter()
    tok.train_from_iterator(seqs, tr)
    s = time.perf_counter() - t0
    tok.save(a.save)
    print(json.dumps({"seconds": s}))


def read_lines(path):
    return pathlib.Path(path).read_text(encoding="utf-8").split("\n")[:-1]


def worker_encode_hf(a):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(a.tokenizer)
    lines = read_lines(a.data)
    nbytes = sum(len(x.encode()) for x in lines)
    best, ntok = None, 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        enc = tok.encode_batch(lines, add_special_tokens=False)
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
        ntok = sum(len(e.ids) for e in enc)
    print(json.dumps({"seconds": best, "bytes": nbytes, "tokens": ntok,
                      "mb_per_s": nbytes / 1e6 / best}))


def worker_encode_tiktoken(a):
    import tiktoken
    vocab = json.loads(pathlib.Path(a.tokenizer).read_text(encoding="utf-8"))
    dec = byte_decoder()
    added = {t["content"]: t["id"] for t in vocab["added_tokens"]}
    ranks = {bytes(dec[c] for c in tokstr): i for tokstr, i in vocab["model"]["vocab"].items()
             if tokstr not in added}
    enc = tiktoken.Encoding("normlab-bench", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens=added)
    lines = read_lines(a.data)
    nbytes = sum(len(x.encode()) for x in lines)
    best, ntok = None, 0
    for _ in range(a.repeat):
        t0 = time.perf_counter()
        if a.threads == 1:
            out = [enc.encode_ordinary(x) for x in lines]
        else:
            # tiktoken releases the GIL while it encodes; its encode_ordinary_batch hands the pool
            # one line at a time, whose overhead swamped the work on short lines, so each thread
            # gets chunks of 1000 lines instead.
            chunks = [lines[i:i + 1000] for i in range(0, len(lines), 1000)]
            with ThreadPoolExecutor(a.threads) as ex:
                out = [ids for part in ex.map(lambda c: [enc.encode_ordinary(x) for x in c],
                                              chunks) for ids in part]
        s = time.perf_counter() - t0
        best = s if best is None else min(best, s)
        ntok = sum(len(x) for x in out)
    print(json.dumps({"seconds": best, "bytes": nbytes, "tokens": ntok,
                      "mb_per_s": nbytes / 1e6 / best}))


# --- the driver ----------------------------------------------------------------------------------

def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if p.returncode != 0:
        return {"error": f"exit {p.returncode}: {p.stderr.strip()[-300:]}"}
    return p


def measure_train_normlab(normlab, data, vocab, out, threads):
    p = run([normlab, "tokenizer", "train", "--data", data, "--vocab-size", str(vocab),
             "--special-tokens", "<|endoftext|>", "--out", out, "--threads", str(threads)])
    if isinstance(p, dict):
        return p
    m = re.search(r"training took ([0-9.]+) s", p.stdout)
    return {"seconds": float(m.group(1))} if m else {"error": p.stdout[-300:]}


def measure_py(mode, threads, **kw):
    env = {"RAYON_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "true"}
    cmd = [sys.executable, __file__, "--worker", mode, "--threads", str(threads)]
    for k, v in kw.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    p = run(cmd, env)
    return p if isinstance(p, dict) else json.loads(p.stdout.strip().splitlines()[-1])


def measure_encode_normlab(normlab, tok, data, threads, repeat):
    p = run([normlab, "tokenizer", "encode", "--tokenizer", tok, "--input", data, "--lines",
             "--time", "--repeat", str(repeat), "--threads", str(threads)])
    return p if isinstance(p, dict) else json.loads(p.stdout.strip().splitlines()[-1])


def med(rs, key="seconds"):
    v = [r[key] for r in rs if "error" not in r]
    return statistics.median(v) if v else None


def machine():
    try:
        info = dict(l.split(":", 1) for l in subprocess.run(
            ["lscpu"], capture_output=True, text=True).stdout.splitlines() if ":" in l)
        return f"{info.get('Model name', '?').strip()}, {os.cpu_count()} CPU(s)"
    except OSError:
        return f"{platform.processor()}, {os.cpu_count()} CPU(s)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--normlab", default=str(ROOT / "build" / "normlab"))
    ap.add_argument("--data", default=str(ROOT / "data" / "wordnet_glosses.txt"))
    ap.add_argument("--vocab-size", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tokenizer")
    ap.add_argument("--save")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    ap.add_argument("--command", default="bench/tokenizers.sh")
    a = ap.parse_args()
    if a.worker:
        {"train_hf": worker_train_hf, "encode_hf": worker_encode_hf,
         "encode_tiktoken": worker_encode_tiktoken}[a.worker](a)
        return

    from importlib.metadata import version
    work = pathlib.Path(tempfile.mkdtemp(prefix="normlab-tokbench-"))
    nl_json, hf_json = work / "normlab.json", work / "hf.json"
    threads = sorted({1, a.threads})
    start = datetime.datetime.now(datetime.timezone.utc)
    train = {(impl, t): [] for impl in ("normlab", "tokenizers") for t in threads}
    enc = {(impl, t): [] for impl in ("normlab", "tokenizers", "tiktoken") for t in threads}
    loads = []
    for r in range(a.rounds):
        print(f"round {r + 1}/{a.rounds}", file=sys.stderr)
        # the machine's load when the round starts (other processes share the cores)
        try:
            loads.append(pathlib.Path("/proc/loadavg").read_text().split()[0])
        except OSError:
            pass
        for t in threads:
            train[("normlab", t)].append(measure_train_normlab(a.normlab, a.data, a.vocab_size,
                                                               nl_json, t))
            train[("tokenizers", t)].append(measure_py("train_hf", t, data=a.data,
                                                       vocab_size=a.vocab_size, save=hf_json))
        for t in threads:
            enc[("normlab", t)].append(measure_encode_normlab(a.normlab, nl_json, a.data, t,
                                                              a.repeat))
            enc[("tokenizers", t)].append(measure_py("encode_hf", t, tokenizer=nl_json,
                                                     data=a.data, repeat=a.repeat))
            enc[("tiktoken", t)].append(measure_py("encode_tiktoken", t, tokenizer=nl_json,
                                                   data=a.data, repeat=a.repeat))
    end = datetime.datetime.now(datetime.timezone.utc)

    # Same merges? Same ids on the timed text?
    nl_model = json.loads(nl_json.read_text())["model"]
    hf_model = json.loads(hf_json.read_text())["model"] if hf_json.exists() else None
    same_merges = hf_model is not None and nl_model["merges"] == hf_model["merges"]
    tok_counts = {k: {r.get("tokens") for r in v if "error" not in r} for k, v in enc.items()}

    nbytes = pathlib.Path(a.data).stat().st_size
    o = ["## Tokenizers\n"]
    o.append(f"Generated by `{a.command}` on {start:%Y-%m-%d %H:%M} to {end:%H:%M} (UTC); "
             f"medians over {a.rounds} round(s), each measurement in a fresh process. Machine: "
             f"{machine()}; tokenizers {version('tokenizers')}, tiktoken "
             f"{version('tiktoken')}, Python {platform.python_version()}."
             + (f" Load average (1 min) at the start of each round: {', '.join(loads)} (on "
                f"{os.cpu_count()} CPU(s); above that, other processes competed for the cores)." if loads else "")
             + "\n")
    o.append(f"Text: `{os.path.relpath(a.data, ROOT)}` ({nbytes:,} bytes, the embedded corpus). "
             f"Training: byte-level BPE, GPT-2 pre-tokenization, vocabulary {a.vocab_size} "
             "(one special token), min_frequency 2; normlab reads the file as one document, "
             "tokenizers' BpeTrainer gets its lines with their newlines (the same pre-tokens). "
             "Time = the trainer alone (not reading the file or writing the JSON). "
             f"Merges identical to BpeTrainer's: **{'yes' if same_merges else 'no'}**.\n")
    o.append("| training | " + " | ".join(f"{t} thread{'s' if t > 1 else ''} s" for t in threads)
             + " |")
    o.append("|---|" + "---|" * len(threads))
    for impl in ("normlab", "tokenizers"):
        o.append(f"| {impl} | " + " | ".join(
            (f"{med(train[(impl, t)]):.2f}" if med(train[(impl, t)]) else
             next((r["error"] for r in train[(impl, t)] if "error" in r), "n/a")[:120])
            for t in threads) + " |")
    o.append("| normlab speed-up (tokenizers s / normlab s) | " + " | ".join(
        (f"{med(train[('tokenizers', t)]) / med(train[('normlab', t)]):.2f}x"
         if med(train[("normlab", t)]) and med(train[("tokenizers", t)]) else "n/a")
        for t in threads) + " |")
    o.append("")
    o.append("normlab's trainer (src/text/bpe_train.cpp) counts distinct pre-tokens on all threads "
             "(a document is cut at newlines where no pre-token can span the cut), then takes "
             "merges from a priority queue of pair counts that is updated only for the words "
             "holding the merged pair, stale entries being dropped when popped; ties go to the "
             "smallest (left id, right id), the reference's rule, hence the identical merges.\n")
    counts = {c for v in tok_counts.values() for c in v}
    missing = [f"{k[0]}/{k[1]}" for k, v in tok_counts.items() if not v]
    o.append("Encoding: normlab's trained vocabulary, every line of the text encoded on its own as a "
             f"batch ({nbytes:,} bytes less the newlines), best of {a.repeat} per process; normlab "
             "`tokenizer encode --lines --time`, tokenizers `encode_batch`, tiktoken "
             "`encode_ordinary` (with threads: chunks of 1000 lines on a thread pool; its own "
             "`encode_ordinary_batch`, one line per task, ran slower with 2 threads than with 1). "
             "Token counts equal across implementations: **"
             + ("yes" if len(counts) == 1 and not missing else
                "no: " + ", ".join(f"{k[0]}/{k[1]}: {sorted(v)}" for k, v in tok_counts.items()))
             + "**.\n")
    o.append("| encode MB/s | " + " | ".join(f"{t} thread{'s' if t > 1 else ''}" for t in threads)
             + " |")
    o.append("|---|" + "---|" * len(threads))
    for impl in ("normlab", "tokenizers", "tiktoken"):
        cells = []
        for t in threads:
            v = med(enc[(impl, t)], "mb_per_s")
            cells.append(f"{v:.2f}" if v else
                         next((r["error"] for r in enc[(impl, t)] if "error" in r), "n/a")[:120])
        o.append(f"| {impl} | " + " | ".join(cells) + " |")
    for ref in ("tokenizers", "tiktoken"):
        cells = []
        for t in threads:
            n, d = med(enc[("normlab", t)], "mb_per_s"), med(enc[(ref, t)], "mb_per_s")
            cells.append(f"{n / d:.2f}x" if n and d else "n/a")
        o.append(f"| normlab / {ref} | " + " | ".join(cells) + " |")
    o.append("")
    o.append("<details><summary>per round</summary>\n")
    for k, v in list(train.items()) + list(enc.items()):
        kind = "train s" if k in train and v is train.get(k) else "encode MB/s"
        vals = [(f"{r['seconds']:.3f}" if kind == "train s" else f"{r['mb_per_s']:.2f}")
                if "error" not in r else "error" for r in v]
        o.append(f"- {kind}, {k[0]}, {k[1]} thread(s): " + ", ".join(vals))
    o.append("\n</details>\n")
    section = "\n".join(o).rstrip() + "\n"

    out = pathlib.Path(a.out)
    text = out.read_text() if out.exists() else ""
    start_i = text.find("\n## Tokenizers\n")
    if start_i >= 0:
        nxt = text.find("\n## ", start_i + 1)
        text = text[:start_i + 1] + section + ("\n" + text[nxt + 1:] if nxt >= 0 else "")
    else:
        at = text.find("\n## Definitions\n")
        text = (text[:at + 1] + section + "\n" + text[at + 1:]) if at >= 0 else \
            (text.rstrip() + "\n\n" + section)
    out.write_text(text)
    print(section)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
