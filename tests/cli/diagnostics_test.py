#!/usr/bin/env python3
"""What a new user sees from `braid check` and `braid train` (issue 24): every mistake of a file in one pass,
without cascades.
Usage: diagnostics_test.py BRAID_BINARY SOURCE_DIR WORK_DIR"""
import os
import shutil
import subprocess
import sys

braid, src, work = sys.argv[1], os.path.abspath(sys.argv[2]), sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")
results = []


def run(args):
    return subprocess.run([braid] + args, capture_output=True, text=True, timeout=300)


def case(name, ok, detail=""):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail[-1500:]))


def errors(stderr):
    return [l for l in stderr.splitlines() if ": error: " in l or l.startswith("error: ")]


# 1. Five mistakes in one model file: five errors in one run, each located, nothing cascaded.
five = os.path.join(src, "tests", "bad", "five_mistakes.yaml")
r = run(["check", five])
errs = errors(r.stderr)
case("five mistakes: exit 2 and exactly five located errors", r.returncode == 2 and len(errs) == 5
     and all(e.startswith(five + ":") for e in errs), r.stderr)
case("five mistakes: the block's error once, naming its copies",
     sum("unknown op 'gleu'" in e for e in errs) == 1 and "(in copies h.0..h.1)" in r.stderr, r.stderr)

print(f"{sum(results)} passed, {len(results) - sum(results)} failed")
sys.exit(0 if all(results) else 1)
