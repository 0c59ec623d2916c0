#!/usr/bin/env bash
# Optimizer-state and gradient sharding (plan `zero`, docs/plan_file.md) on tiny_gpt grown to d 512, 8 layers,
# 8 heads (seq 64, batch 8), data parallel over cpu:4 (micro-batch 2 per replica): for zero 0, 1 and 2, what each
# device holds after the first step (parameters, gradients, optimizer state, arena: the metrics file's first
# record, Engine::memory) and the step time of `braid bench`, rounds interleaved. Each device's share of the
# whole is its bytes over zero 0's. Writes scripts/bench/out/zero/summary.txt.
# usage: scripts/bench/zero.sh [--rounds R] [--steps N] [--stages 0,1,2,3,3i]      BRAID=path overrides build/braid
#        stage "3i": zero 3 with its gathers inline (BRAID_PREFETCH=0), against "3"'s prefetched ones
set -euo pipefail
cd "$(dirname "$0")/../.."
BRAID=${BRAID:-build/braid}
ROUNDS=3
STEPS=6
STAGES=(0 1 2)
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --stages) IFS=, read -r -a STAGES <<< "$2"; shift 2 ;;
    *) echo "zero.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
OUT=scripts/bench/out/zero
mkdir -p "$OUT"
SETS=(--set vars.d=512 --set vars.n_layer=8 --set vars.heads=8 --set vars.dropout=0.1 --set train.batch=8
      --set train.micro_batch=2 --set devices=cpu:4)
prefetch() { case "$1" in *i) echo 0 ;; *) echo 1 ;; esac; }
for z in "${STAGES[@]}"; do
  cat > "$OUT/plan_$z.yaml" <<PLAN
summary: {devices: 4, data_parallel: 4, tensor_parallel: 1, pipeline_stages: 1, micro_batch: 2, micro_batches: 1,
          schedule: 1f1b, zero: ${z%i}}
stages:
  - {devices: [0, 1, 2, 3], mesh: [4, 1], first_layer: tok, last_layer: loss}
PLAN
  rm -f "$OUT/metrics_$z.jsonl"
  BRAID_PREFETCH=$(prefetch "$z") "$BRAID" train configs/tiny_gpt.yaml "${SETS[@]}" --set parallel.plan="$OUT/plan_$z.yaml" --set train.steps=1 \
    --set log.metrics="$OUT/metrics_$z.jsonl" --set log.every_steps=1 > /dev/null
done
for r in $(seq 1 "$ROUNDS"); do
  for z in "${STAGES[@]}"; do
    BRAID_PREFETCH=$(prefetch "$z") "$BRAID" bench configs/tiny_gpt.yaml "${SETS[@]}" --set parallel.plan="$OUT/plan_$z.yaml" --steps "$STEPS" \
      --warmup 2 --window 1 --json "$OUT/zero${z}_r$r.json" > /dev/null
  done
done
/usr/bin/python3 - "$OUT" "$ROUNDS" "${STAGES[@]}" <<'PY' | tee "$OUT/summary.txt"
import json, statistics, sys
out, rounds, stages = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
kinds = [("param", "parameters"), ("grad", "gradients"), ("optimizer", "optimizer"), ("arena", "arena")]
mem, step = {}, {}
for z in stages:
    first = json.loads(open(f"{out}/metrics_{z}.jsonl").readline())
    mem[z] = {k: [first[f"mem_{k}_bytes_d{d}"] / 2**20 for d in range(4)] for k, _ in kinds}
    runs = [json.load(open(f"{out}/zero{z}_r{r}.json"))["rows"][0]["step_ms_median"] for r in range(1, rounds + 1)]
    step[z] = (statistics.median(runs), min(runs), max(runs))
base = mem[stages[0]]
print("tiny_gpt d 512, 8 layers, 8 heads, seq 64, batch 8, cpu:4 data parallel (micro-batch 2); MiB per device")
print("(largest of the 4 devices; share = that over zero 0's), step ms median of", rounds, "rounds (min-max)")
print(f"{'zero':4} " + " ".join(f"{name:>10} {'share':>6}" for _, name in kinds) + f" {'step ms':>9} {'range':>15}")
for z in stages:
    cells = []
    for k, _ in kinds:
        most = max(mem[z][k])
        cells.append(f"{most:10.1f} {most / max(base[k]):6.3f}")
    med, lo, hi = step[z]
    print(f"{z:4} " + " ".join(cells) + f" {med:9.1f} {lo:7.1f}-{hi:<7.1f}")
PY
