#!/usr/bin/env bash
# braid's predictions against published measurements of large GPT runs on DGX A100 clusters (docs/planner.md,
# "Validation against published runs"). For each case: the published configuration pinned in a plan file
# (data / tensor / pipeline parallel, micro-batch, schedule, recomputation, ZeRO stage; braid chooses the layers'
# signatures and the stage cuts), its predicted step time beside the published one (ratio), then braid's own
# choice with its prediction and the planning time (whole `braid plan` process). Cases without a published
# figure are planned only (530B on 2,240 and 1T on 3,072 A100s must fit).
# usage: scripts/bench/published.sh [--keep DIR] [--explain] [--efficiency E]      BRAID=path/to/braid overrides build/braid
#        --efficiency E: plan every case on cluster files whose device has compute_efficiency E (the fraction of the
#        peak the products reach; the analytic default is 0.5): a sensitivity run, not a validation
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BRAID=${BRAID:-$ROOT/build/braid}
KEEP=""
EXPLAIN=""
EFF=""
while [ $# -gt 0 ]; do
  case "$1" in
    --keep) KEEP=$2; shift 2 ;;
    --explain) EXPLAIN=1; shift ;;
    --efficiency) EFF=$2; shift 2 ;;
    *) echo "published.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$BRAID" ] || { echo "published.sh: $BRAID not found; build it first or set BRAID" >&2; exit 2; }
tmp=${KEEP:-$(mktemp -d)}
mkdir -p "$tmp"
[ -n "$KEEP" ] || trap 'rm -rf "$tmp"' EXIT

# run NAME LAYERS HIDDEN HEADS VOCAB BATCH: a run file of the GPT family (models/bench/gpt3_175b.yaml's blocks:
# pre-norm, learned positions, GELU MLP of 4h, dropout 0.1), seq 2048, bf16, AdamW.
run() {
  cat > "$tmp/$1.yaml" <<YAML
model: $ROOT/models/bench/gpt3_175b.yaml
vars: {n_layer: $2, d: $3, heads: $4, vocab: $5, seq: 2048}
data: {train: {format: synthetic, samples: 4096}}
train: {batch: $6, steps: 1, precision: bf16}
optimizer: {type: adamw, lr: 1.0e-4}
devices: cpu
YAML
}
# pins NAME DEVICES DP TP PP MICRO_BATCH RECOMPUTE ZERO: the published configuration as a plan file (summary only).
pins() {
  local mbs=$(( $(awk '/^train:/ {gsub(/[^0-9 ]/, " "); print $1}' "$tmp/$1.yaml") / $3 / $6 ))
  cat > "$tmp/$1.pins.yaml" <<YAML
summary:
  devices: $2
  data_parallel: $3
  tensor_parallel: $4
  pipeline_stages: $5
  micro_batch: $6
  micro_batches: $mbs
  schedule: 1f1b
  recompute: $7
  zero: $8
stages: []
layers: []
YAML
  sed "s|^devices: cpu|parallel: {plan: $1.pins.yaml}\ndevices: cpu|" "$tmp/$1.yaml" > "$tmp/$1.pinned.yaml"
}
# predicted FILE: the step time a written plan file predicts.
predicted() { grep -o 'step_time_s: [0-9.e+-]*' "$1" | head -1 | awk '{print $2}'; }
shape() {
  awk '/^  (data_parallel|tensor_parallel|pipeline_stages|micro_batch|micro_batches|schedule|recompute|zero):/ {
         v[$1] = $2 } END { printf "dp %s tp %s pp %s, %s x %s, %s, recompute %s, zero %s", v["data_parallel:"],
         v["tensor_parallel:"], v["pipeline_stages:"], v["micro_batches:"], v["micro_batch:"], v["schedule:"],
         v["recompute:"] ? v["recompute:"] : "none (or per layer)", v["zero:"] ? v["zero:"] : 0 }' "$1"
}
recomputed_layers() { grep -c "recompute: " "$1" || true; }
# cluster_arg NAME: the --cluster argument. dgx-a100-40gb:N (MT-NLG's DGX A100 servers with 40 GB parts, which no
# preset describes) is written as a cluster file: dgx-a100-80gb's links and peaks, the A100 SXM4 40GB datasheet's
# memory (40 GB) and HBM bandwidth (1,555 GB/s).
# With --efficiency, dgx-a100-80gb:N is written out the same way (the preset's figures, src/planner/cluster.cpp).
cluster_arg() {
  local mem bw name
  case "$1" in
    dgx-a100-40gb:*) mem=40e9; bw=1.555e12; name=a100-sxm4-40gb ;;
    dgx-a100-80gb:*) [ -n "$EFF" ] || { echo "$1"; return; }; mem=80e9; bw=2.039e12; name=a100-sxm4-80gb ;;
    *) echo "$1"; return ;;
  esac
  cat > "$tmp/$1.cluster.yaml" <<YAML
name: $1
nodes: ${1##*:}
devices_per_node: 8
device:
  name: $name
  peak_flops: {f32: 19.5e12, tf32: 156e12, bf16: 312e12, f16: 312e12}
  memory_bytes: $mem
  memory_bandwidth: $bw${EFF:+
  compute_efficiency: $EFF}
links:
  intra_node: {bandwidth: 300e9, latency: 3e-6}
  inter_node: {bandwidth: 25e9, latency: 6e-6}
YAML
  echo "$tmp/$1.cluster.yaml"
}

# name | layers hidden heads vocab batch | cluster | dp tp pp micro-batch recompute zero | published s | source
#   published s: the step time published, or derived from the published TFLOP/s or MFU (docs/planner.md)
run megatron175 96 12288 96 51200 1536
run k530 105 20480 128 51200 2240
run mtnlg 105 20480 128 50272 1920
run bloom176 70 14336 112 250880 2048
run t1 128 25600 160 51200 3072
printf '%-36s %-16s %10s %10s %7s   %s\n' case cluster published predicted ratio "braid's choice: predicted (vs published), planning time"
while IFS='|' read -r name file cluster dp tp pp mb rc zero published; do
  n=$(( ${cluster##*:} * 8 ))
  cl=$(cluster_arg "$cluster")
  if [ "$published" != "-" ]; then
    pins "$file" "$n" "$dp" "$tp" "$pp" "$mb" "$rc" "$zero"
    "$BRAID" plan "$tmp/$file.pinned.yaml" --cluster "$cl" --out "$tmp/$file.pinned.plan.yaml" \
      ${EXPLAIN:+--explain} > "$tmp/$file.pinned.out" 2>&1 || { cat "$tmp/$file.pinned.out"; exit 1; }
    pred=$(predicted "$tmp/$file.pinned.plan.yaml")
    ratio=$(awk -v p="$pred" -v q="$published" 'BEGIN {printf "%.2f", p / q}')
  else
    pred=-; ratio=-
  fi
  t0=$(date +%s.%N)
  "$BRAID" plan "$tmp/$file.yaml" --cluster "$cl" --out "$tmp/$file.plan.yaml" > "$tmp/$file.out" 2>&1 ||
    { cat "$tmp/$file.out"; exit 1; }
  t1=$(date +%s.%N)
  own=$(predicted "$tmp/$file.plan.yaml")
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  vs=$([ "$published" != "-" ] && awk -v p="$own" -v q="$published" 'BEGIN {printf " (%.2fx)", p / q}' || true)
  printf '%-36s %-16s %10s %10s %7s   %.2f s%s in %s s: %s; %s layers recomputed\n' "$name" "$cluster" "$published" \
    "$([ "$pred" = - ] && echo - || printf '%.2f' "$pred")" "$ratio" "$own" "$vs" "$secs" "$(shape "$tmp/$file.plan.yaml")" \
    "$(recomputed_layers "$tmp/$file.plan.yaml")"
  [ -z "$EXPLAIN" ] || sed -n '/^chosen:/,/^pure/p' "$tmp/$file.pinned.out" 2>/dev/null || true
done <<'CASES'
GPT-3 175B, Megatron-LM README|megatron175|dgx-a100-80gb:128|8|8|16|1|full|0|32
MT-NLG 530B, 2,240 A100s|mtnlg|dgx-a100-40gb:280|8|8|35|1|full|1|60.1
MT-NLG 530B, 2,800 A100s|mtnlg|dgx-a100-40gb:350|10|8|35|1|full|1|50.2
MT-NLG 530B, 3,360 A100s|mtnlg|dgx-a100-40gb:420|12|8|35|1|full|1|44.4
530B, Korthikanti: selective+SP|k530|dgx-a100-80gb:280|8|8|35|1|selective|0|39.1
530B, Korthikanti: full recompute|k530|dgx-a100-80gb:280|8|8|35|1|full|0|50.4
BLOOM-176B shape, ZeRO-1 (DeepSpeed)|bloom176|dgx-a100-80gb:48|8|4|12|2|full|1|78.8
1T GPT (plan only)|t1|dgx-a100-80gb:384|-|-|-|-|-|-|-
CASES
