#!/bin/bash
# braid against PyTorch on the benchmark models of issue 8 (configs/bench/{mlp,lenet,gpt}.yaml and the same
# models in scripts/bench/torch_bench.py), in one run, one process per measurement.
# PyTorch runs under three thread settings (its default; torch.set_num_threads(1); 2 threads with
# OMP_WAIT_POLICY=passive) and the best median samples/s is compared. Peak RSS of every process is measured
# the same way for both, by /usr/bin/time (maximum resident set size).
# --rounds R repeats the four measurements of each model R times, interleaved (braid, torch default, 1,
# 2passive, braid, ...), so that a shared machine's load falls on every system alike: each figure is the
# median over rounds of that process's median samples/s, and the ratio is the median over rounds of
# braid / (that round's best PyTorch setting), with its min-max over rounds.
# Before each model's round, the machine's SGEMM ceiling (scripts/bench/sgemm_ceiling.cpp: oneDNN's dnnl_sgemm on
# square matrices of 1024-2048 at braid's thread count) is measured, and braid's achieved training FLOP/s
# (`braid bench`'s achieved_gflops) is stated as a fraction of that round's ceiling (median, min-max over rounds).
# Writes scripts/bench/out/vs_pytorch.csv (one row per model and system) and prints a table with the ratios.
#
# usage: scripts/bench/vs_pytorch.sh [--steps N] [--warmup W] [--window K] [--rounds R] [--models "mlp lenet gpt"]
#        [--summarise-only] (rebuild the CSV and table from the raw files of the last run)
#        [--isa avx2|baseline] (both systems capped to that instruction set: braid's loops by BRAID_CPU_ISA,
#        PyTorch's by ATEN_CPU_CAPABILITY, and for both, and the SGEMM ceiling, oneDNN by ONEDNN_MAX_CPU_ISA and
#        OpenBLAS by OPENBLAS_CORETYPE: how an AVX-512 machine measures the AVX2 path side by side)
#        BRAID=path/to/braid overrides build/braid; BRAID_ENV="OMP_NUM_THREADS=1 ..." sets braid's environment.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
PY=/usr/bin/python3
STEPS=30 WARMUP=5 WINDOW=5 ROUNDS=1 MODELS="mlp lenet gpt" MEASURE=1 ISA=
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --summarise-only) MEASURE=0; shift ;;
    --isa) ISA=$2; shift 2 ;;
    *) echo "vs_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
CAP=() BRAID_CAP=() TORCH_CAP=()
case "$ISA" in
  "") ;;
  avx2) CAP=(ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell)
        BRAID_CAP=(BRAID_CPU_ISA=avx2) TORCH_CAP=(ATEN_CPU_CAPABILITY=avx2) ;;
  baseline) CAP=(ONEDNN_MAX_CPU_ISA=SSE41 DNNL_MAX_CPU_ISA=SSE41 OPENBLAS_CORETYPE=Nehalem)
        BRAID_CAP=(BRAID_CPU_ISA=baseline) TORCH_CAP=(ATEN_CPU_CAPABILITY=default) ;;
  *) echo "vs_pytorch.sh: --isa takes avx2 or baseline, not '$ISA'" >&2; exit 2 ;;
esac
[ -z "$ISA" ] || echo "vs_pytorch.sh: both systems capped to $ISA: ${CAP[*]} ${BRAID_CAP[*]} ${TORCH_CAP[*]}"
[ -x "$BRAID" ] || { echo "vs_pytorch.sh: $BRAID not found; build it first (ninja braid) or set BRAID" >&2; exit 2; }
OUT=$ROOT/scripts/bench/out
RAW=$OUT/raw
mkdir -p "$RAW"
[ $MEASURE = 1 ] && rm -f "$RAW"/*
CEILING=$(mktemp -d)/sgemm_ceiling
if [ $MEASURE = 1 ]; then
  g++ -O2 -fopenmp "$ROOT/scripts/bench/sgemm_ceiling.cpp" -o "$CEILING" -ldnnl ||
    { echo "vs_pytorch.sh: cannot build scripts/bench/sgemm_ceiling.cpp (needs g++ and libdnnl-dev)" >&2; exit 2; }
fi

for m in $MODELS; do
  [ $MEASURE = 1 ] || break
  for r in $(seq 1 "$ROUNDS"); do
    echo "== $m round $r: SGEMM ceiling"
    env "${CAP[@]}" OMP_NUM_THREADS=${CEILING_THREADS:-$(nproc)} "$CEILING" 5 | tee "$RAW/ceiling_${m}_r$r.json"
    echo "== $m round $r: braid"
    env "${CAP[@]}" "${BRAID_CAP[@]}" ${BRAID_ENV:-} /usr/bin/time -f %M -o "$RAW/braid_${m}_r$r.rss" \
      "$BRAID" bench "$ROOT/configs/bench/$m.yaml" --steps "$STEPS" --warmup "$WARMUP" --window "$WINDOW" \
      --json "$RAW/braid_${m}_r$r.json" | tee "$RAW/braid_${m}_r$r.txt" | grep -E "OpenMP wait|samples/s" | tail -n 3
    for setting in default 1 2passive; do
      echo "== $m round $r: torch, threads $setting"
      case $setting in
        default) env=(); threads=default ;;
        1) env=(); threads=1 ;;
        2passive) env=(OMP_WAIT_POLICY=passive); threads=2 ;;
      esac
      env "${CAP[@]}" "${TORCH_CAP[@]}" "${env[@]}" /usr/bin/time -f %M -o "$RAW/torch_${m}_${setting}_r$r.rss" \
        $PY "$ROOT/scripts/bench/torch_bench.py" "$m" --threads "$threads" --steps "$STEPS" --warmup "$WARMUP" \
        --window "$WINDOW" --json "$RAW/torch_${m}_${setting}_r$r.json"
    done
  done
done
[ $MEASURE = 1 ] && echo "load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$RAW/load.txt"

$PY - "$RAW" "$OUT/vs_pytorch.csv" "$MODELS" <<'EOF'
import csv, glob, json, statistics, sys
raw, out, models = sys.argv[1], sys.argv[2], sys.argv[3].split()
med = statistics.median
def rss_mib(path):
    return int(open(path).read().split()[-1]) / 1024  # /usr/bin/time %M: KiB
def rounds(prefix):
    files = sorted(glob.glob(f"{raw}/{prefix}_r*.json"), key=lambda f: int(f.rsplit("_r", 1)[1][:-5]))
    return [(json.load(open(f)), rss_mib(f[:-5] + ".rss")) for f in files]
def quantile(xs, q):  # linear interpolation, numpy's default, as braid bench
    pos = q * (len(xs) - 1)
    lo = int(pos)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (pos - lo)
cols = ["model", "system", "threads", "rounds", "samples_per_s_median", "samples_per_s_min", "samples_per_s_max",
        "samples_per_s_p25", "samples_per_s_p75", "round_medians", "tokens_per_s_median", "step_ms_median",
        "peak_rss_mib", "torch_best", "sps_ratio_vs_torch_best", "sps_ratio_min", "sps_ratio_max",
        "rss_ratio_vs_torch_best"]
rows, table = [], []
for m in models:
    systems = [("braid", rounds(f"braid_{m}"))] + [(f"torch-{s}", rounds(f"torch_{m}_{s}")) for s in ["default", "1", "2passive"]]
    srows = []
    for name, rs in systems:
        if not rs:
            sys.exit(f"vs_pytorch.sh: no raw results for {m} {name} in {raw}")
        js = [j["rows"][0] if "rows" in j else j for j, _ in rs]
        # samples/s: the median over rounds of each process's median; min, max, quartiles: over every window
        # of every round
        wins = sorted(w for j in js for w in j["window_samples_per_s"])
        sps = [j["samples_per_s_median"] for j in js]
        srows.append({"model": m, "system": name, "threads": js[0]["threads"], "rounds": len(js),
                      "samples_per_s_median": med(sps), "samples_per_s_min": wins[0], "samples_per_s_max": wins[-1],
                      "samples_per_s_p25": quantile(wins, 0.25), "samples_per_s_p75": quantile(wins, 0.75),
                      "round_medians": " ".join(f"{v:.1f}" for v in sps),
                      "tokens_per_s_median": med(sps) * js[0]["tokens_per_sample"],
                      "step_ms_median": med(j["step_ms_median"] for j in js),
                      "peak_rss_mib": max(x for _, x in rs), "_sps": sps})
    brow, trows = srows[0], srows[1:]
    best = max(trows, key=lambda r: r["samples_per_s_median"])
    for r in trows:
        r["torch_best"] = int(r is best)
    n = min(len(r["_sps"]) for r in srows)
    per_round = [brow["_sps"][k] / max(r["_sps"][k] for r in trows) for k in range(n)]
    brow["sps_ratio_vs_torch_best"] = med(per_round)
    brow["sps_ratio_min"], brow["sps_ratio_max"] = min(per_round), max(per_round)
    brow["rss_ratio_vs_torch_best"] = brow["peak_rss_mib"] / best["peak_rss_mib"]
    rows += srows
    table.append((m, brow, best))
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
print()
print(f"{'model':6}  {'system':15} {'samples/s':>10} {'min-max':>15} {'IQR':>8} {'tokens/s':>9} {'RSS MiB':>8}  per round")
for r in rows:
    tok = f"{r['tokens_per_s_median']:.0f}" if r["tokens_per_s_median"] else "-"
    mark = " *" if r.get("torch_best") else ""
    print(f"{r['model']:6}  {r['system'] + mark:15} {r['samples_per_s_median']:10.1f} "
          f"{r['samples_per_s_min']:7.1f}-{r['samples_per_s_max']:<7.1f} {r['samples_per_s_p75'] - r['samples_per_s_p25']:8.1f} "
          f"{tok:>9} {r['peak_rss_mib']:8.1f}  {r['round_medians']}")
print("(* PyTorch's best thread setting: the highest median over rounds)")
print()
print(f"{'model':6}  {'torch best':15} {'braid/torch samples/s':>22} {'min-max':>13} {'braid/torch peak RSS':>21}")
for m, b, t in table:
    print(f"{m:6}  {t['system']:15} {b['sps_ratio_vs_torch_best']:22.2f}x "
          f"{b['sps_ratio_min']:5.2f}-{b['sps_ratio_max']:<5.2f} {b['rss_ratio_vs_torch_best']:20.2f}x")
print("(samples/s ratio: per round, braid / that round's best PyTorch setting; median and min-max over rounds)")
print()
print(f"{'model':6}  {'SGEMM ceiling GFLOP/s':>22} {'braid GFLOP/s':>14} {'braid / ceiling':>16} {'min-max':>12}")
for m, b, t in table:
    ceil = [json.load(open(f"{raw}/ceiling_{m}_r{k}.json"))["ceiling_gflops"] for k in range(1, b["rounds"] + 1)
            if glob.glob(f"{raw}/ceiling_{m}_r{k}.json")]
    got = [(j["rows"][0] if "rows" in j else j)["achieved_gflops"] for j, _ in rounds(f"braid_{m}")]
    if not ceil or len(ceil) != len(got):
        continue
    frac = [g / c for g, c in zip(got, ceil)]
    print(f"{m:6}  {med(ceil):22.1f} {med(got):14.1f} {100 * med(frac):15.1f}% {100 * min(frac):5.1f}-{100 * max(frac):<5.1f}%")
print("(braid's training FLOPs per step x samples/s against the same round's two-thread dnnl_sgemm ceiling)")
print(f"\nCSV: {out}")
EOF
