#!/usr/bin/env bash
# Sequence parallelism (plan `sequence_parallel`, docs/plan_file.md) on tiny_gpt grown to d 512, 8 layers, 8 heads
# (seq 64, batch 8, one micro-batch, dropout 0.1), tensor parallel over cpu:2 (every block's fc column-split, proj
# row-split): without and with sequence_parallel, the largest device's static arena (activations and temporaries,
# which the CPU allocates exactly) and the step time of `braid bench`, rounds interleaved.
# Writes scripts/bench/out/sequence_parallel/summary.txt.
# usage: scripts/bench/sequence_parallel.sh [--rounds R] [--steps N]      BRAID=path overrides build/braid
set -euo pipefail
cd "$(dirname "$0")/../.."
BRAID=${BRAID:-build/braid}
ROUNDS=3
STEPS=6
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    *) echo "sequence_parallel.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
OUT=scripts/bench/out/sequence_parallel
mkdir -p "$OUT"
SETS=(--set vars.d=512 --set vars.n_layer=8 --set vars.heads=8 --set vars.dropout=0.1 --set train.batch=8
      --set train.micro_batch=8 --set devices=cpu:2)
for sp in false true; do
  {
    echo "summary: {devices: 2, data_parallel: 1, tensor_parallel: 2, pipeline_stages: 1, micro_batch: 8,"
    echo "          micro_batches: 1, schedule: 1f1b, sequence_parallel: $sp}"
    echo "stages:"
    echo "  - {devices: [0, 1], mesh: [1, 2], first_layer: tok, last_layer: loss}"
    echo "layers:"
    for l in $(seq 0 7); do
      echo "  - {layer: h.$l.fc, signature: column, tensor_parallel: 2}"
      echo "  - {layer: h.$l.proj, signature: row, tensor_parallel: 2}"
    done
  } > "$OUT/plan_$sp.yaml"
  rm -f "$OUT/metrics_$sp.jsonl"
  "$BRAID" train configs/tiny_gpt.yaml "${SETS[@]}" --set parallel.plan="$OUT/plan_$sp.yaml" --set train.steps=1 \
    --set log.metrics="$OUT/metrics_$sp.jsonl" --set log.every_steps=1 > /dev/null
done
for r in $(seq 1 "$ROUNDS"); do
  for sp in false true; do
    "$BRAID" bench configs/tiny_gpt.yaml "${SETS[@]}" --set parallel.plan="$OUT/plan_$sp.yaml" --steps "$STEPS" \
      --warmup 2 --window 1 --json "$OUT/sp_${sp}_r$r.json" > /dev/null
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
rows = {}
for sp in ["false", "true"]:
    first = json.loads(open(f"{out}/metrics_{sp}.jsonl").readline())
    arena = max(first[f"mem_arena_bytes_d{d}"] for d in range(2)) / 2**20
    step = [json.load(open(f"{out}/sp_{sp}_r{r}.json"))["rows"][0]["step_ms_median"] for r in range(1, rounds + 1)]
    rows[sp] = (arena, statistics.median(step), min(step), max(step))
base = rows["false"]
print("tiny_gpt d 512, 8 layers, 8 heads, seq 64, batch 8, cpu:2 tensor parallel (fc column, proj row)")
print(f"{'sequence_parallel':18} {'arena MiB':>10} {'vs off':>7} {'step ms':>9} {'range':>15} {'vs off':>7}")
for sp, (arena, med, lo, hi) in rows.items():
    print(f"{sp:18} {arena:10.1f} {base[0] / arena:6.2f}x {med:9.1f} {lo:7.1f}-{hi:<7.1f} {med / base[1]:6.3f}x")
PY
