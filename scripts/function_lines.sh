#!/usr/bin/env bash
# The longest functions of the given files (default: src/exec/*.cpp): lines from a function's opening brace at
# the end of a line starting at column 0 (a definition, not a class or namespace) to the '}' at column 0 that
# closes it. Prints "lines file:line name", the longest first (issue 38: none over 150 in src/exec/).
# usage: scripts/function_lines.sh [-n TOP] [FILES...]
set -euo pipefail
cd "$(dirname "$0")/.."
top=15
if [[ "${1:-}" == -n ]]; then top=$2; shift 2; fi
files=("$@")
((${#files[@]})) || files=(src/exec/*.cpp)
awk '
  FNR == 1 { inside = 0 }
  !inside && /^[A-Za-z].*[)].*\{[[:space:]]*$/ && !/^(namespace|class|struct|enum|union|extern)/ {
    inside = 1; start = FNR; name = $0; sub(/\(.*/, "", name); n = split(name, w, " "); name = w[n]; next
  }
  inside && /^\}/ { printf "%6d %s:%d %s\n", FNR - start + 1, FILENAME, start, name; inside = 0 }
' "${files[@]}" | sort -rn | head -n "$top"
