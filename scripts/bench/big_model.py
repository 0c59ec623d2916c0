#!/usr/bin/env python3
"""Writes a model file of about SIZE_MB megabytes on one line (flow style): many vars, then a layer with an
unknown op near the end, so `braid check` must read everything and report the op with its file:line:col.
It measures the loader on long lines (issue 24: source positions were quadratic in the line length).
Usage: big_model.py SIZE_MB [OUT] (default /tmp/big_model_<SIZE_MB>mb.yaml); prints the path, the number
of vars and the location braid must report."""
import sys


def main():
    size_mb = float(sys.argv[1]) if len(sys.argv) > 1 else 5
    out = sys.argv[2] if len(sys.argv) > 2 else f"/tmp/big_model_{sys.argv[1] if len(sys.argv) > 1 else 5}mb.yaml"
    target = int(size_mb * 1_000_000)
    parts = []
    total = 0
    n = 0
    while total < target:
        p = f"v{n}: {n % 1000}"
        parts.append(p)
        total += len(p) + 2
        n += 1
    head = "{name: big, vars: {" + ", ".join(parts) + "}, inputs: {x: {shape: [4]}}, layers: [{name: fc, op: "
    text = head + "no_such_op, out: 2}], outputs: [fc]}\n"
    with open(out, "w") as f:
        f.write(text)
    col = len(head) + 1  # 1-based column of the op's value (ASCII only: characters are bytes)
    print(f"{out}: {len(text)} bytes, {n} vars, expect {out}:1:{col}: unknown op 'no_such_op'")


if __name__ == "__main__":
    main()
