#!/usr/bin/env python3
"""Runs `braid check` on every broken file in tests/bad and checks the contract for bad input:
exit status 2, a message with the file:line:col the file's first line promises (`# expect: L:C fragment`
or `# expect-cli: L:C fragment`), no crash, no hang (10 s), no runaway memory (2 GiB), no stack trace.
Usage: bad_corpus.py BRAID_BINARY BAD_DIR"""
import os
import resource
import subprocess
import sys


def limits():
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def expectation(path):
    with open(path, "rb") as f:
        first = f.readline().decode("utf-8", "replace").strip()
    for tag in ("# expect:", "# expect-cli:"):
        if first.startswith(tag):
            rest = first[len(tag):].strip()
            loc, _, frag = rest.partition(" ")
            return loc, frag.strip()
    return None, None


def main():
    braid, bad_dir = sys.argv[1], sys.argv[2]
    passed = failed = 0
    for name in sorted(os.listdir(bad_dir)):
        path = os.path.join(bad_dir, name)
        if not os.path.isfile(path) or name.startswith("_"):
            continue
        loc, frag = expectation(path)
        if name.endswith((".bin", ".yaml")) and loc is None and not name.endswith(".bin"):
            continue  # helper files (data referenced by run files) carry no expectation
        try:
            r = subprocess.run([braid, "check", path], capture_output=True, timeout=10, preexec_fn=limits)
        except subprocess.TimeoutExpired:
            print(f"FAIL {name}: hung (over 10 s)")
            failed += 1
            continue
        err = r.stderr.decode("utf-8", "replace")
        problems = []
        if r.returncode != 2:
            problems.append(f"exit status {r.returncode}, expected 2")
        if "internal error" in err or "terminate called" in err or r.returncode < 0:
            problems.append("crashed or hit an internal error")
        if loc is not None:
            want = f"{path}:{loc}:"
            if want not in err:
                problems.append(f"no error at {loc}")
            elif frag and frag not in err:
                problems.append(f"message lacks '{frag}'")
        elif ":" not in err:
            problems.append("no location in the message")
        if problems:
            failed += 1
            print(f"FAIL {name}: {'; '.join(problems)}\n    {err.strip()[:400]}")
        else:
            passed += 1
            print(f"ok   {name}: {err.strip().splitlines()[0][:150] if err.strip() else ''}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or passed < 30 else 0


if __name__ == "__main__":
    sys.exit(main())
