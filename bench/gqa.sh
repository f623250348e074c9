#!/usr/bin/env bash
# Grouped-query attention (issue #18): training and decoding throughput and KV-cache memory of a
# GQA model (gqa: 8 query heads over 2 key/value heads) against the same model with full
# multi-head attention (gqa_mha: 8 key/value heads), in normlab and in transformers'
# LlamaForCausalLM under PyTorch eager and torch.compile, on this machine. Writes the section
# "Grouped-query attention" of docs/benchmarks.md (replacing it, or inserting it before
# "## Definitions"); the rest of the file is left as it is.
#
#   bench/gqa.sh
#
# Environment (all optional):
#   BUILD_DIR=build   where normlab_bench is built (ninja/cmake --build "$BUILD_DIR" --target normlab_bench)
#   ROUNDS=3          rounds; each round runs every measurement once, in turn, each in a fresh
#                     process (so that a noisy moment hits all of them); the tables show medians
#   THREADS=2         threads for normlab and torch.set_num_threads
#   STEPS=10 WARMUP=3 timed training steps (median) after warm-up steps
#   PROMPT=128 TOKENS=128 REPS=3   decoding: prompt length, generated tokens, timed repetitions
#   COMPILE=1         also torch.compile for training (0: skip)
#   DECODE_COMPILE=0  also torch.compile for decoding (1: run it; its compilation of the growing
#                     cache's shapes took minutes even for a tiny model on the 2-core machine)
#   PYTHON=           the interpreter with torch and transformers (default: .venv/bin/python)
#   OUT=docs/benchmarks.md   RESULTS=$BUILD_DIR/gqa-results (the raw JSON)
#   ONLY=             a regular expression: run only the measurements whose name matches (e.g.
#                     'normlab-'), keeping the other results already in $RESULTS (KEEP=1 implied)
#   KEEP=0            1: keep $RESULTS' earlier files (a rerun of a measurement replaces its own)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$ROOT/build}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
STEPS=${STEPS:-10}
WARMUP=${WARMUP:-3}
PROMPT=${PROMPT:-128}
TOKENS=${TOKENS:-128}
REPS=${REPS:-3}
COMPILE=${COMPILE:-1}
DECODE_COMPILE=${DECODE_COMPILE:-0}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
RESULTS=${RESULTS:-$BUILD_DIR/gqa-results}
ONLY=${ONLY:-}
KEEP=${KEEP:-0}
[ -n "$ONLY" ] && KEEP=1
CONFIGS="gqa gqa_mha"
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$ROOT/.venv/bin/python" ] && PYTHON="$ROOT/.venv/bin/python"
fi

cmake --build "$BUILD_DIR" --target normlab_bench -j "$THREADS" >/dev/null
BENCH="$BUILD_DIR/bench/normlab_bench"
[ -x "$BENCH" ] || { echo "gqa.sh: $BENCH not found (configure $BUILD_DIR first)" >&2; exit 1; }

[ "$KEEP" = 1 ] || rm -rf "$RESULTS"
mkdir -p "$RESULTS"

# run NAME CMD...: stdout (one JSON object) to $RESULTS/NAME.json, stderr to NAME.log; a failure
# is recorded as {"error": ...} so that the table shows it.
run() {
  local name=$1
  shift
  [[ -n "$ONLY" && ! $name =~ $ONLY ]] && return 0
  echo "  $name" >&2
  local status=0
  "$@" >"$RESULTS/$name.json" 2>"$RESULTS/$name.log" || status=$?
  if [ "$status" != 0 ]; then
    local msg
    msg=$(tail -n 3 "$RESULTS/$name.log" | tr '\n"\\' '   ' | cut -c1-300)
    printf '{"error": "exit status %s: %s"}\n' "$status" "$msg" >"$RESULTS/$name.json"
  fi
}

TORCH=(env OMP_WAIT_POLICY=PASSIVE "$PYTHON" "$ROOT/bench/torch_gqa.py")
TRAIN_ARGS=(--steps "$STEPS" --warmup "$WARMUP" --threads "$THREADS")
DECODE_ARGS=(--prompt "$PROMPT" --tokens "$TOKENS" --reps "$REPS" --threads "$THREADS")
for r in $(seq 1 "$ROUNDS"); do
  echo "round $r/$ROUNDS" >&2
  # the machine's load when the round starts (other processes share the cores)
  [ -z "$ONLY" ] && { cut -d' ' -f1-3 /proc/loadavg >"$RESULTS/loadavg_r$r.txt" 2>/dev/null || true; }
  # GQA and MHA of one kind follow each other within seconds (their ratio is the point).
  for c in $CONFIGS; do run "normlab-train_${c}_r$r" "$BENCH" train "$c" "${TRAIN_ARGS[@]}"; done
  for c in $CONFIGS; do run "normlab-decode_${c}_r$r" "$BENCH" decode "$c" "${DECODE_ARGS[@]}"; done
  for c in $CONFIGS; do run "eager-train_${c}_r$r" "${TORCH[@]}" train "$c" "${TRAIN_ARGS[@]}"; done
  for c in $CONFIGS; do run "eager-decode_${c}_r$r" "${TORCH[@]}" decode "$c" "${DECODE_ARGS[@]}"; done
  if [ "$COMPILE" = 1 ]; then
    for c in $CONFIGS; do
      run "compile-train_${c}_r$r" "${TORCH[@]}" train "$c" --compile "${TRAIN_ARGS[@]}"
    done
  fi
  if [ "$DECODE_COMPILE" = 1 ]; then
    for c in $CONFIGS; do
      run "compile-decode_${c}_r$r" "${TORCH[@]}" decode "$c" --compile "${DECODE_ARGS[@]}"
    done
  fi
done

cmd="bench/gqa.sh"
for v in ROUNDS THREADS STEPS WARMUP PROMPT TOKENS REPS COMPILE DECODE_COMPILE ONLY KEEP; do
  case $v in
    ROUNDS) d=3 ;; THREADS) d=2 ;; STEPS) d=10 ;; WARMUP) d=3 ;; PROMPT) d=128 ;; TOKENS) d=128 ;;
    REPS) d=3 ;; COMPILE) d=1 ;; DECODE_COMPILE) d=0 ;; ONLY) d= ;; KEEP) d=0 ;;
  esac
  [ "${!v}" != "$d" ] && cmd="$v=\"${!v}\" $cmd"
done

# The report: medians over rounds, every number from this run's files.
"$PYTHON" - "$RESULTS" "$OUT" "$cmd" <<'PY'
import datetime, glob, json, os, platform, re, statistics, subprocess, sys

results, out_path, command = sys.argv[1:4]
runs = {}
for path in sorted(glob.glob(os.path.join(results, "*.json"))):
    m = re.match(r"(\w+)-(train|decode)_(\w+?)_r(\d+)\.json$", os.path.basename(path))
    if not m:
        continue
    impl, mode, cfg, rnd = m.groups()
    try:
        lines = open(path).read().strip().splitlines()
        j = json.loads(lines[-1]) if lines else {"error": "no output"}
    except (OSError, ValueError) as e:
        j = {"error": f"unreadable result: {e}"}
    j["_round"] = int(rnd)
    runs.setdefault((impl, mode, cfg), []).append(j)
for v in runs.values():
    v.sort(key=lambda j: j["_round"])
rounds = max((len(v) for v in runs.values()), default=0)


def rs(impl, mode, cfg):
    return runs.get((impl, mode, cfg), [])


def med(impl, mode, cfg, key):
    vals = [x[key] for x in rs(impl, mode, cfg) if "error" not in x and x.get(key) is not None]
    return statistics.median(vals) if vals else None


def err(impl, mode, cfg):
    return next((x["error"] for x in rs(impl, mode, cfg) if "error" in x), None)


def per_round(impl, mode, cfg, key):
    return [x.get(key) for x in rs(impl, mode, cfg) if "error" not in x]


def f(x, nd=0):
    return "n/a" if x is None else f"{x:,.{nd}f}"


def ratio(x, y):
    return f"{x / y:.2f}x" if x and y else "n/a"


def paired(impl, mode, key, a="gqa", b="gqa_mha"):
    """Median over rounds of a's value over b's in the same round."""
    ra = {x["_round"]: x.get(key) for x in rs(impl, mode, a) if "error" not in x}
    rb = {x["_round"]: x.get(key) for x in rs(impl, mode, b) if "error" not in x}
    v = [ra[k] / rb[k] for k in sorted(set(ra) & set(rb)) if ra[k] and rb[k]]
    return (statistics.median(v), v) if v else (None, [])


def mib(b):
    return None if b is None else b / 2**20


model, flags = platform.processor() or "unknown", ""
try:
    info = {}
    for line in subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            info[k.strip()] = v.strip()
    model = info.get("Model name", model)
    cpus = info.get("CPU(s)", os.cpu_count())
except (OSError, subprocess.CalledProcessError):
    cpus = os.cpu_count()
tv = next((x.get("torch") for (i, _, _), v in runs.items() if i == "eager" for x in v if x.get("torch")), "n/a")
hv = next((x.get("transformers") for (i, _, _), v in runs.items() if i == "eager" for x in v
           if x.get("transformers")), "n/a")
attn = next((x.get("attn_implementation") for (i, _, _), v in runs.items() if i == "eager" for x in v
             if x.get("attn_implementation")), "n/a")
stamps = [os.path.getmtime(p) for p in glob.glob(os.path.join(results, "*.json"))]
t0 = datetime.datetime.fromtimestamp(min(stamps)) if stamps else datetime.datetime.now()
t1 = datetime.datetime.fromtimestamp(max(stamps)) if stamps else t0
def first_of(key, mode):
    return next((x[key] for (_, m, _), v in sorted(runs.items()) if m == mode for x in v
                 if x.get(key) is not None), None)


prompt, tokens, threads = first_of("prompt", "decode"), first_of("tokens", "decode"), first_of("threads", "train")

o = ["## Grouped-query attention\n"]
o.append(f"Generated by `{command}` on {t0:%Y-%m-%d %H:%M} to {t1:%H:%M} (UTC); medians over {rounds} "
         "round(s), each round running every measurement once, in turn, each in a fresh process. "
         f"Machine: {model}, {cpus} CPU(s); {threads if threads else 'n/a'} "
         f"threads for every implementation; PyTorch {tv}, transformers {hv} (`LlamaForCausalLM`, "
         f"attention `{attn}`), `OMP_WAIT_POLICY=PASSIVE`.\n")
o.append("Models (bench/bench_config.cpp, bench/torch_gqa.py): Llama-shaped, V=2048 C=512 L=6 H=8 "
         "head_dim=64 F=1408 (SwiGLU) T=256, pre-norm RMSNorm (eps 1e-6), RoPE 10000, untied head, "
         "no biases, float32; **gqa** has 2 key/value heads (4 query heads share each), "
         "**gqa_mha** 8 (full multi-head attention). Training: batch 4 x 256 tokens, the step of "
         "docs/benchmarks.md (zero grad, forward, loss, backward, clipping 1.0, AdamW), random "
         f"tokens. Decoding: batch 1, greedy, KV cache; a random prompt of {prompt} tokens "
         f"(prefill), then {tokens} single-token steps, so that the cache ends holding "
         f"{prompt + tokens if prompt and tokens else 'n/a'} positions; KV-cache bytes = the cache's key and value "
         "storage at the end (normlab: `KvCache::k` and `v`, allocated for all T positions; "
         "transformers: the `DynamicCache` layers' `keys` and `values`).\n")

loads = []
for p in sorted(glob.glob(os.path.join(results, "loadavg_r*.txt"))):
    try:
        loads.append(open(p).read().split()[0])
    except (OSError, IndexError):
        pass
if loads:
    o.append("Load average (1 min) at the start of each round: " + ", ".join(loads)
             + f" (on {cpus} CPU(s); above that, other processes competed for the cores).\n")
o.append("normlab, GQA against MHA:\n")
o.append("| model | KV heads | params | train tok/s | prefill tok/s | decode tok/s | KV cache | "
         "peak RSS MiB train / decode |")
o.append("|" + "---|" * 8)
for c in ("gqa", "gqa_mha"):
    kv = med("normlab", "decode", c, "kv_cache_bytes")
    kvh = next((x["kv_width"] // 64 for x in rs("normlab", "decode", c) if x.get("kv_width")), None)
    o.append(f"| {c} | {kvh if kvh else 'n/a'} | {f(med('normlab', 'train', c, 'params'))} "
             f"| {f(med('normlab', 'train', c, 'tokens_per_s'))} "
             f"| {f(med('normlab', 'decode', c, 'prefill_tokens_per_s'))} "
             f"| {f(med('normlab', 'decode', c, 'decode_tokens_per_s'))} "
             f"| {f(kv)} B ({f(mib(kv), 2)} MiB) "
             f"| {f(med('normlab', 'train', c, 'peak_rss_mb'))} / {f(med('normlab', 'decode', c, 'peak_rss_mb'))} |")
cells = []
for mode, key in (("train", "tokens_per_s"), ("decode", "prefill_tokens_per_s"),
                  ("decode", "decode_tokens_per_s"), ("decode", "kv_cache_bytes")):
    v, per = paired("normlab", mode, key)
    cells.append("n/a" if v is None else f"{v:.2f}x" + (" (" + ", ".join(f"{x:.2f}" for x in per) + ")"
                                                         if len(per) > 1 and key != "kv_cache_bytes" else ""))
o.append(f"| gqa / gqa_mha (per round) | | | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} | |")
o.append("")

o.append("Against transformers' implementation of the same models (tok/s, medians; ratios are "
         "normlab over PyTorch):\n")
o.append("| model | train normlab / eager / compile | vs eager | vs compile | prefill normlab / eager "
         "| vs eager | decode normlab / eager | vs eager | KV cache bytes normlab / transformers "
         "| peak RSS MiB train normlab / eager / compile |")
o.append("|" + "---|" * 10)
for c in ("gqa", "gqa_mha"):
    n, e, k = (med(i, "train", c, "tokens_per_s") for i in ("normlab", "eager", "compile"))
    np_, ep = (med(i, "decode", c, "prefill_tokens_per_s") for i in ("normlab", "eager"))
    nd, ed = (med(i, "decode", c, "decode_tokens_per_s") for i in ("normlab", "eager"))
    kc = "error" if err("compile", "train", c) and not k else f(k)
    o.append(f"| {c} | {f(n)} / {f(e)} / {kc} | {ratio(n, e)} | {ratio(n, k)} | {f(np_)} / {f(ep)} "
             f"| {ratio(np_, ep)} | {f(nd)} / {f(ed)} | {ratio(nd, ed)} "
             f"| {f(med('normlab', 'decode', c, 'kv_cache_bytes'))} / {f(med('eager', 'decode', c, 'kv_cache_bytes'))} "
             f"| {f(med('normlab', 'train', c, 'peak_rss_mb'))} / {f(med('eager', 'train', c, 'peak_rss_mb'))} "
             f"/ {f(med('compile', 'train', c, 'peak_rss_mb'))} |")
o.append("")
for impl in ("eager", "compile"):
    v, per = paired(impl, "train", "tokens_per_s")
    if v is not None:
        o.append(f"PyTorch {impl}: gqa / gqa_mha train tok/s {v:.2f}x per round "
                 + ", ".join(f"{x:.2f}" for x in per) + ".")
for key, what in (("prefill_tokens_per_s", "prefill"), ("decode_tokens_per_s", "decode")):
    v, per = paired("eager", "decode", key)
    if v is not None:
        o.append(f"PyTorch eager: gqa / gqa_mha {what} tok/s {v:.2f}x per round "
                 + ", ".join(f"{x:.2f}" for x in per) + ".")
if not runs.get(("compile", "decode", "gqa")):
    o.append("\ntorch.compile is timed for training only: compiling the decoding loop (a growing "
             "cache, new shapes every step) took minutes even for a tiny model on this machine "
             "(`DECODE_COMPILE=1` runs it).")
o.append("")

o.append("<details><summary>per round</summary>\n")
o.append("| model | impl | train tok/s | prefill tok/s | decode tok/s | first training step ms | error |")
o.append("|" + "---|" * 7)
for c in ("gqa", "gqa_mha"):
    for impl in ("normlab", "eager", "compile"):
        if not rs(impl, "train", c) and not rs(impl, "decode", c):
            continue
        tr = ", ".join(f(x) for x in per_round(impl, "train", c, "tokens_per_s") if x) or "n/a"
        pf = ", ".join(f(x) for x in per_round(impl, "decode", c, "prefill_tokens_per_s") if x) or "n/a"
        dc = ", ".join(f(x) for x in per_round(impl, "decode", c, "decode_tokens_per_s") if x) or "n/a"
        first = ", ".join(f(x, 1) for x in per_round(impl, "train", c, "first_step_ms") if x) or ""
        e = (err(impl, "train", c) or err(impl, "decode", c) or "").replace("|", "/")[:200]
        o.append(f"| {c} | {impl} | {tr} | {pf} | {dc} | {first} | {e} |")
o.append("\nThe first training step of torch.compile includes its compilation, served in part by "
         "the inductor's on-disk cache when earlier runs on the machine compiled the same graphs.")
o.append("\n</details>\n")
section = "\n".join(o).rstrip() + "\n"

text = open(out_path).read() if os.path.exists(out_path) else ""
start = text.find("\n## Grouped-query attention\n")
if start >= 0:
    nxt = text.find("\n## ", start + 1)
    text = text[:start + 1] + section + ("\n" + text[nxt + 1:] if nxt >= 0 else "")
else:
    at = text.find("\n## Definitions\n")
    text = (text[:at + 1] + section + "\n" + text[at + 1:]) if at >= 0 else \
        (text.rstrip() + "\n\n" + section)
with open(out_path, "w") as fh:
    fh.write(text)
print(section)
print(f"wrote {out_path}")
PY
