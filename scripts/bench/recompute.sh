#!/usr/bin/env bash
# Activation recomputation (plan `recompute`, docs/plan_file.md) on tiny_gpt grown to d 512, 8 layers, 8 heads
# (seq 64, batch 8, one micro-batch, one CPU device, dropout 0.1): for recompute none, full and selective, the
# static arena braid allocates for the step (the activations and temporaries, measured: the executor allocates
# exactly the memory plan's bytes; gradients live in the parameter store) and the step time of `braid bench`,
# rounds interleaved. Writes scripts/bench/out/recompute/summary.txt.
# usage: scripts/bench/recompute.sh [--rounds R] [--steps N]      BRAID=path overrides build/braid
set -euo pipefail
cd "$(dirname "$0")/../.."
BRAID=${BRAID:-build/braid}
ROUNDS=3
STEPS=6
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "recompute.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
OUT=scripts/bench/out/recompute
mkdir -p "$OUT"
SETS=(--set vars.d=512 --set vars.n_layer=8 --set vars.heads=8 --set vars.dropout=0.1 --set train.batch=8
      --set train.micro_batch=8 --set devices=cpu)
for mode in none full selective; do
  cat > "$OUT/plan_$mode.yaml" <<PLAN
summary: {devices: 1, data_parallel: 1, tensor_parallel: 1, pipeline_stages: 1, micro_batch: 8, micro_batches: 1,
          schedule: 1f1b, recompute: $mode}
stages:
  - {devices: [0], mesh: [1, 1], first_layer: tok, last_layer: loss}
PLAN
done
for r in $(seq 1 "$ROUNDS"); do
  for mode in none full selective; do
    "$BRAID" bench configs/tiny_gpt.yaml "${SETS[@]}" --set parallel.plan="$OUT/plan_$mode.yaml" --steps "$STEPS" \
      --warmup 2 --window 1 --json "$OUT/${mode}_r$r.json" > /dev/null
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in ["none", "full", "selective"]:
    runs = [json.load(open(f"{out}/{mode}_r{r}.json"))["rows"][0] for r in range(1, rounds + 1)]
    arena = runs[0]["arena_bytes"] / 2**20
    step = [x["step_ms_median"] for x in runs]
    rows[mode] = (arena, statistics.median(step), min(step), max(step))
base = rows["none"]
print("tiny_gpt d 512, 8 layers, 8 heads, seq 64, batch 8, one CPU device; medians over", rounds, "rounds")
print(f"{'recompute':10} {'arena MiB':>10} {'vs none':>8} {'step ms':>9} {'range':>15} {'vs none':>8}")
for mode, (arena, med, lo, hi) in rows.items():
    print(f"{mode:10} {arena:10.1f} {base[0] / arena:7.2f}x {med:9.1f} {lo:7.1f}-{hi:<7.1f} {med / base[1]:7.3f}x")
PY
