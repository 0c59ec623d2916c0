#!/usr/bin/env bash
# The code that runs a training step (issue 20's measure): the engine, the programs (node loop, executors, shards),
# the backend interface and registry, and the backends' step glue, not their kernels. Code lines: not blank and not
# only a // comment. Prints each file's count and the total, at the working tree or at a git revision.
# usage: scripts/step_lines.sh [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
# Each entry is a path, or path=old_path where the file moved (the old path is read at revisions before the move).
files=(src/exec/engine.cpp src/exec/engine.h
       src/backends/cpu/executor.cpp=src/exec/executor.cpp src/backends/cpu/executor.h=src/exec/executor.h
       src/exec/node_loop.cpp src/exec/node_loop.h
       src/backends/cpu/cpu_graph.cpp=src/exec/runner.cpp src/backends/cpu/cpu_graph.h=src/exec/runner.h
       src/exec/shards.cpp src/exec/backend.cpp src/exec/backend.h src/backends/cpu/cpu_backend.cpp
       src/backends/cuda/cuda_backend.cpp src/backends/cuda/cuda_executor.cpp src/backends/cuda/cuda_executor.h
       src/backends/cuda/cuda_backend.h=src/backends/cuda/cuda_engine.h
       src/backends/cuda/cuda_optimizer.cpp src/backends/cuda/cuda_optimizer.h
       src/backends/cpu/optimizer.cpp=src/exec/optimizer.cpp src/backends/cpu/optimizer.h=src/exec/optimizer.h
       src/exec/stage_policy.cpp src/exec/stage_policy.h src/exec/evaluator.cpp src/exec/evaluator.h
       src/backends/cuda/device_eval.cpp src/backends/cuda/device_eval.h)
# Both backends' optimizers and evaluators count (issue 38): the CPU's optimizer is backends/cpu/optimizer.*, the
# evaluators were CpuEvaluator (cpu_backend.cpp) and DeviceEvaluator (device_eval.*, gone 2026-12-08) and are now
# one, exec/evaluator.*. A file missing at a revision counts 0.
total=0
for entry in "${files[@]}"; do
  f=${entry%%=*}
  old=${entry#*=}
  if [ $# -gt 0 ]; then
    text=$(git show "$1:$f" 2>/dev/null || git show "$1:$old" 2>/dev/null || true)
  else
    text=$(cat "$f" 2>/dev/null || true)
  fi
  n=$(printf '%s\n' "$text" | sed -e 's://.*$::' | grep -cv '^[[:space:]]*$' || true)
  printf '%6d %s\n' "$n" "$f"
  total=$((total + n))
done
printf '%6d total\n' "$total"
