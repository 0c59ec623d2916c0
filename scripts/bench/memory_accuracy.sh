#!/usr/bin/env bash
# The planner's predicted peak memory per device against the measured one, for each memory strategy, on tiny_gpt
# grown to d 512, 8 layers, 8 heads (seq 64, batch 8, dropout 0.1): the plan files of recompute.sh (one device,
# recompute none/full/selective) and zero.sh (cpu:4 data parallel, zero 0-3). Predicted: `braid plan RUN
# --explain`'s peak_memory_gb for the pinned plan. Measured: one step of `braid train`, the metrics file's first
# record (arena + parameters + gradients + optimizer state of the fullest device; the CPU allocates exactly
# these). Writes scripts/bench/out/memory_accuracy/summary.txt.
# usage: scripts/bench/memory_accuracy.sh      BRAID=path overrides build/braid
set -euo pipefail
cd "$(dirname "$0")/../.."
BRAID=${BRAID:-build/braid}
OUT=$PWD/scripts/bench/out/memory_accuracy
mkdir -p "$OUT"
MODEL=(--set vars.d=512 --set vars.n_layer=8 --set vars.heads=8 --set vars.dropout=0.1 --set train.batch=8)
plan_file() {  # name devices dp micro_batch recompute zero
  local mesh devs
  devs=$(seq -s, 0 $(($2 - 1)))
  cat > "$OUT/plan_$1.yaml" <<PLAN
summary: {devices: $2, data_parallel: $3, tensor_parallel: 1, pipeline_stages: 1, micro_batch: $4, micro_batches: 1,
          schedule: 1f1b, recompute: $5, zero: $6}
stages:
  - {devices: [$devs], mesh: [$3, 1], first_layer: tok, last_layer: loss}
PLAN
}
CASES=()
for r in none full selective; do plan_file "recompute_$r" 1 1 8 "$r" 0; CASES+=("recompute_$r cpu 8"); done
for z in 0 1 2 3; do plan_file "zero_$z" 4 4 2 none "$z"; CASES+=("zero_$z cpu:4 2"); done
: > "$OUT/rows.txt"
for c in "${CASES[@]}"; do
  read -r name devices mb <<< "$c"
  sets=("${MODEL[@]}" --set train.micro_batch="$mb" --set devices="$devices" --set parallel.plan="$OUT/plan_$name.yaml")
  predicted=$("$BRAID" plan configs/tiny_gpt.yaml "${sets[@]}" --explain | sed -n 's/.*peak_memory_gb: \([0-9.e+-]*\).*/\1/p' | head -1)
  rm -f "$OUT/metrics_$name.jsonl"
  "$BRAID" train configs/tiny_gpt.yaml "${sets[@]}" --set train.steps=1 --set log.metrics="$OUT/metrics_$name.jsonl" \
    --set log.every_steps=1 > /dev/null
  echo "$name $predicted" >> "$OUT/rows.txt"
done
/usr/bin/python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, re, sys
out = sys.argv[1]
print("| plan | predicted GB | measured GB | predicted / measured |")
print("| --- | --- | --- | --- |")
worst = 0.0
for line in open(f"{out}/rows.txt"):
    name, predicted = line.split()
    rec = json.loads(open(f"{out}/metrics_{name}.jsonl").readline())
    per_dev = {}
    for k, v in rec.items():
        m = re.match(r"mem_(arena|param|grad|optimizer)_bytes_d(\d+)$", k)
        if m: per_dev[m.group(2)] = per_dev.get(m.group(2), 0) + v
    measured = max(per_dev.values()) / 1e9
    ratio = float(predicted) / measured
    worst = max(worst, abs(ratio - 1))
    print(f"| {name.replace('_', ' ')} | {float(predicted):.4f} | {measured:.4f} | {ratio:.3f} |")
print(f"\nworst |predicted/measured - 1|: {100 * worst:.1f}%")
PY
