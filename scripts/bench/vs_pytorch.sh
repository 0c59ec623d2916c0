#!/bin/bash
# braid against PyTorch on the benchmark models of issue 8 (configs/bench/{mlp,lenet,gpt}.yaml and the same
# models in scripts/bench/torch_bench.py), in one run, one process per measurement, model by model.
# PyTorch runs under three thread settings (its default; torch.set_num_threads(1); 2 threads with
# OMP_WAIT_POLICY=passive) and the best median samples/s is compared. Peak RSS of every process is measured
# the same way for both, by /usr/bin/time (maximum resident set size).
# Writes scripts/bench/out/vs_pytorch.csv (one row per model and system) and prints a table with the ratios.
#
# usage: scripts/bench/vs_pytorch.sh [--steps N] [--warmup W] [--window K] [--models "mlp lenet gpt"]
#        [--summarise-only] (rebuild the CSV and table from the raw files of the last run)
#        BRAID=path/to/braid overrides build/braid.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
PY=/usr/bin/python3
STEPS=30 WARMUP=5 WINDOW=5 MODELS="mlp lenet gpt" MEASURE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --window) WINDOW=$2; shift 2 ;;
    --models) MODELS=$2; shift 2 ;;
    --summarise-only) MEASURE=0; shift ;;
    *) echo "vs_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$BRAID" ] || { echo "vs_pytorch.sh: $BRAID not found; build it first (ninja braid) or set BRAID" >&2; exit 2; }
OUT=$ROOT/scripts/bench/out
RAW=$OUT/raw
mkdir -p "$RAW"
[ $MEASURE = 1 ] && rm -f "$RAW"/*

for m in $MODELS; do
  [ $MEASURE = 1 ] || break
  echo "== $m: braid"
  /usr/bin/time -f %M -o "$RAW/braid_$m.rss" \
    "$BRAID" bench "$ROOT/configs/bench/$m.yaml" --steps "$STEPS" --warmup "$WARMUP" --window "$WINDOW" \
    --json "$RAW/braid_$m.json" | tail -n 3
  for setting in default 1 2passive; do
    echo "== $m: torch, threads $setting"
    case $setting in
      default) env=(); threads=default ;;
      1) env=(); threads=1 ;;
      2passive) env=(OMP_WAIT_POLICY=passive); threads=2 ;;
    esac
    env "${env[@]}" /usr/bin/time -f %M -o "$RAW/torch_${m}_$setting.rss" \
      $PY "$ROOT/scripts/bench/torch_bench.py" "$m" --threads "$threads" --steps "$STEPS" --warmup "$WARMUP" \
      --window "$WINDOW" --json "$RAW/torch_${m}_$setting.json"
  done
done

$PY - "$RAW" "$OUT/vs_pytorch.csv" "$MODELS" <<'EOF'
import csv, json, sys
raw, out, models = sys.argv[1], sys.argv[2], sys.argv[3].split()
def rss_mib(path):
    return int(open(path).read().split()[-1]) / 1024  # /usr/bin/time %M: KiB
cols = ["model", "system", "threads", "samples_per_s_median", "samples_per_s_min", "samples_per_s_max",
        "samples_per_s_p25", "samples_per_s_p75", "tokens_per_s_median", "step_ms_median", "peak_rss_mib",
        "torch_best", "sps_ratio_vs_torch_best", "rss_ratio_vs_torch_best"]
rows, table = [], []
for m in models:
    b = json.load(open(f"{raw}/braid_{m}.json"))["rows"][0]
    brow = {"model": m, "system": "braid", "threads": b["threads"], "peak_rss_mib": rss_mib(f"{raw}/braid_{m}.rss")}
    for k in cols[3:10]:
        brow[k] = b[k]
    trows = []
    for s in ["default", "1", "2passive"]:
        t = json.load(open(f"{raw}/torch_{m}_{s}.json"))
        r = {"model": m, "system": f"torch-{s}", "threads": t["threads"], "peak_rss_mib": rss_mib(f"{raw}/torch_{m}_{s}.rss")}
        for k in cols[3:10]:
            r[k] = t["samples_per_s_median"] * t["tokens_per_sample"] if k == "tokens_per_s_median" else t[k]
        trows.append(r)
    best = max(trows, key=lambda r: r["samples_per_s_median"])
    for r in trows:
        r["torch_best"] = int(r is best)
    brow["sps_ratio_vs_torch_best"] = brow["samples_per_s_median"] / best["samples_per_s_median"]
    brow["rss_ratio_vs_torch_best"] = brow["peak_rss_mib"] / best["peak_rss_mib"]
    rows += [brow] + trows
    table.append((m, brow, best))
with open(out, "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=cols)
    w.writeheader()
    for r in rows:
        w.writerow({k: (f"{v:.3f}" if isinstance(v, float) else v) for k, v in r.items()})
print()
print(f"{'model':6}  {'system':15} {'samples/s':>10} {'min-max':>15} {'IQR':>8} {'tokens/s':>9} {'RSS MiB':>8}")
for r in rows:
    tok = f"{r['tokens_per_s_median']:.0f}" if r["tokens_per_s_median"] else "-"
    mark = " *" if r.get("torch_best") else ""
    print(f"{r['model']:6}  {r['system'] + mark:15} {r['samples_per_s_median']:10.1f} "
          f"{r['samples_per_s_min']:7.1f}-{r['samples_per_s_max']:<7.1f} {r['samples_per_s_p75'] - r['samples_per_s_p25']:8.1f} "
          f"{tok:>9} {r['peak_rss_mib']:8.1f}")
print("(* PyTorch's best thread setting on this machine)")
print()
print(f"{'model':6}  {'torch best':15} {'braid/torch samples/s':>22} {'braid/torch peak RSS':>21}")
for m, b, t in table:
    print(f"{m:6}  {t['system']:15} {b['sps_ratio_vs_torch_best']:22.2f}x {b['rss_ratio_vs_torch_best']:20.2f}x")
print(f"\nCSV: {out}")
EOF
