#!/usr/bin/env python3
"""Runs `braid check` on every broken file in tests/bad and checks the contract for bad input:
exit status 2, a message with the file:line:col the file's first line promises (`# expect: L:C fragment`
or `# expect-cli: L:C fragment`) and each `# expect-also:` line after it, all from one run, no crash, no
hang (10 s), no runaway memory (2 GiB), no stack trace.
Usage: bad_corpus.py BRAID_BINARY BAD_DIR"""
import os
import resource
import subprocess
import sys


# Under AddressSanitizer (scripts/sanitize.sh sets ASAN_OPTIONS) the binary reserves terabytes of shadow address
# space at start, which an address-space limit forbids: there the 2 GiB bound is left to the normal build.
SANITIZED = "ASAN_OPTIONS" in os.environ


def limits():
    if not SANITIZED:
        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def location(rest, path):
    """`[FILE:]LINE:COL FRAGMENT` -> (the location prefix a message must hold, "path:line:col:", fragment)."""
    prefix = ""
    if rest.startswith("<command line>:"):
        prefix, rest = "<command line>", rest[len("<command line>:"):]
    loc, _, frag = rest.partition(" ")
    parts = loc.split(":")
    if not prefix and len(parts) == 3:  # FILE:LINE:COL, FILE relative to the corpus folder
        prefix = os.path.join(os.path.dirname(path), parts[0])
        loc = ":".join(parts[1:])
    return (prefix or path) + ":" + loc + ":", frag.strip()


def expectation(path):
    """([(where, fragment), ...], sets) from the header: `# expect[-cli]: [FILE:]LINE:COL FRAGMENT` on the first
    line, then any number of `# set: K=V` and `# expect-also: [FILE:]LINE:COL FRAGMENT` lines (a file with
    several mistakes promises each; all must be reported by the one run). `where` is "path:line:col:"."""
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    first = lines[0].decode("utf-8", "replace").strip()
    sets, wants = [], []
    for tag in ("# expect:", "# expect-cli:"):
        if first.startswith(tag):
            wants.append(location(first[len(tag):].strip(), path))
    if not wants:
        return [], sets
    for raw in lines[1:]:
        line = raw.decode("utf-8", "replace").strip()
        if line.startswith("# set:"):
            sets.append(line[len("# set:"):].strip())
        elif line.startswith("# expect-also:"):
            wants.append(location(line[len("# expect-also:"):].strip(), path))
        else:
            break
    return wants, sets


def main():
    braid, bad_dir = sys.argv[1], sys.argv[2]
    passed = failed = 0
    for name in sorted(os.listdir(bad_dir)):
        path = os.path.join(bad_dir, name)
        if not os.path.isfile(path) or name.startswith("_"):
            continue
        wants, sets = expectation(path)
        if not name.endswith(".yaml") or not wants:
            continue  # README and helper files carry no expectation
        cmd = [braid, "check", path]
        for kv in sets:
            cmd += ["--set", kv]
        try:
            r = subprocess.run(cmd, capture_output=True, timeout=10, preexec_fn=limits)
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
        for want, frag in wants:
            at = [l for l in err.splitlines() if want in l]
            if not at:
                problems.append(f"no error at {want}")
            elif frag and not any(frag in l for l in at) and frag not in err:
                problems.append(f"message at {want} lacks '{frag}'")
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
