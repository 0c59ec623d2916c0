#!/usr/bin/env python3
"""End-to-end tests of `braid tokenize` and the `tokens` data format through the braid binary: the README's
steps (train a tokenizer on the GPL-3 text, encode GPL-3 and GPL-2, check and train
configs/text/tiny_gpt_tokens.yaml on them), the decode round trip, and the refusals, each exit 2 with its place:
a corrupt or missing .model, a missing text file, an unknown --dtype, ids past the model's vocabulary (found by
`braid check` as by `braid train`, naming the file and the 0-based token offset), a token file of odd size.
Usage: tokenize_test.py BRAID_BINARY SOURCE_DIR WORK_DIR"""
import os
import shutil
import struct
import subprocess
import sys

braid, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
os.environ["XDG_CACHE_HOME"] = os.path.join(work, "cache")
results = []
gpl3, gpl2 = "/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/GPL-2"
model, bin3, bin2 = (os.path.join(work, f) for f in ("gpl.model", "gpl3.bin", "gpl2.bin"))
run_file = os.path.join(src, "configs", "text", "tiny_gpt_tokens.yaml")
paths = ["--set", f"data.train.path={bin3}", "--set", f"data.eval.path={bin2}"]


def run(args):
    return subprocess.run([braid] + args, capture_output=True, text=True, timeout=600)


def case(name, ok, detail=""):
    results.append(ok)
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))


r = run(["tokenize", "train", gpl3, "--vocab-size", "1024", "-o", model])
case("train", r.returncode == 0 and "1024 pieces" in r.stdout and os.path.getsize(model) > 1000, r.stderr)
r = run(["tokenize", "encode", gpl3, "-m", model, "-o", bin3])
n3 = os.path.getsize(bin3) // 2 if os.path.exists(bin3) else 0
case("encode GPL-3", r.returncode == 0 and f"{n3} tokens (u16)" in r.stdout and "vocabulary 1024" in r.stdout,
     r.stdout + r.stderr)
r = run(["tokenize", "encode", gpl2, "-m", model, "-o", bin2, "--eos"])
ids2 = struct.unpack(f"<{os.path.getsize(bin2) // 2}H", open(bin2, "rb").read())
case("encode GPL-2 --eos ends with </s> (id 2)", r.returncode == 0 and ids2[-1] == 2, r.stderr)
r = run(["tokenize", "decode", bin3, "-m", model, "-o", os.path.join(work, "back.txt")])
case("decode(encode(GPL-3)) is GPL-3, byte for byte",
     r.returncode == 0 and open(os.path.join(work, "back.txt"), "rb").read() == open(gpl3, "rb").read(), r.stderr)
# Several 256 KB encoding blocks: the same ids on one thread as on two.
many = os.path.join(work, "many.txt")
with open(many, "wb") as f:
    f.write((open(gpl3, "rb").read() + open(gpl2, "rb").read()) * 12)
outs = []
for threads in ("1", "2"):
    out = os.path.join(work, f"many{threads}.bin")
    r = subprocess.run([braid, "tokenize", "encode", many, "-m", model, "-o", out], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS=threads), timeout=600)
    outs.append(open(out, "rb").read() if r.returncode == 0 else b"")
case("encode: the same ids on 1 and 2 threads", outs[0] != b"" and outs[0] == outs[1])
r = run(["tokenize", "decode", bin3, "-m", model, "--offset", "0", "--count", "24"])
case("decode a slice to stdout", r.returncode == 0 and "GNU GENERAL PUBLIC LICENSE" in r.stdout, r.stdout + r.stderr)

r = run(["check", run_file] + paths)
case("check the tokens run", r.returncode == 0 and "total:" in r.stdout, r.stderr)
r = run(["train", run_file, "--no-progress", "--set", "train.steps=3", "--set", "log.metrics=" +
         os.path.join(work, "m.jsonl"), "--set", "eval.every_steps=3", "--set", "eval.batches=1"] + paths)
case("train 3 steps on tokens", r.returncode == 0 and "3 steps" in r.stdout, r.stdout[-500:] + r.stderr)

# ids past the vocabulary: the first one's offset, from check as from train, at the data source's line.
first = next(i for i, v in enumerate(struct.unpack(f"<{n3}H", open(bin3, "rb").read())) if v >= 700)
want = f"holds id {struct.unpack('<H', open(bin3, 'rb').read()[2 * first:2 * first + 2])[0]} at token {first} (0-based)"
for cmd in ("check", "train"):
    r = run([cmd, run_file, "--set", "vars.vocab=700"] + paths)
    case(f"{cmd}: id past the vocabulary", r.returncode == 2 and want in r.stderr and
         "tiny_gpt_tokens.yaml:10:" in r.stderr and "gpl3.bin" in r.stderr, r.stderr)

bad = {
    "corrupt .model": (["tokenize", "encode", gpl3, "-m", gpl3, "-o", os.path.join(work, "x.bin")],
                       "is not a SentencePiece model"),
    "missing .model": (["tokenize", "encode", gpl3, "-m", os.path.join(work, "none.model"), "-o",
                        os.path.join(work, "x.bin")], "none.model"),
    "missing text": (["tokenize", "encode", os.path.join(work, "none.txt"), "-m", model, "-o",
                      os.path.join(work, "x.bin")], "text file not found"),
    "unknown --dtype": (["tokenize", "encode", gpl3, "-m", model, "-o", os.path.join(work, "x.bin"), "--dtype", "u8"],
                        "unknown token dtype 'u8'"),
    "vocabulary too large": (["tokenize", "train", gpl3, "--vocab-size", "100000", "-o", os.path.join(work, "y.model")],
                             "Vocabulary size too high"),
    "decode: id past the tokenizer": (["tokenize", "decode", "-m", model, "--ids", "1,5,1024"],
                                      "token id 1024 at position 2"),
}
for name, (args, text) in bad.items():
    r = run(args)
    case(name + " is exit 2", r.returncode == 2 and text in r.stderr, f"rc {r.returncode}: {r.stderr}")
case("nothing written by the refused commands",
     not os.path.exists(os.path.join(work, "x.bin")) and not os.path.exists(os.path.join(work, "y.model")) and
     not [f for f in os.listdir(work) if ".tmp-" in f], str(os.listdir(work)))
with open(os.path.join(work, "odd.bin"), "wb") as f:
    f.write(open(bin3, "rb").read()[:-1])
r = run(["check", run_file, "--set", f"data.train.path={os.path.join(work, 'odd.bin')}", "--set",
         f"data.eval.path={bin2}"])
case("odd-sized token file is exit 2", r.returncode == 2 and "not a multiple of 2" in r.stderr and
     "tiny_gpt_tokens.yaml:10:" in r.stderr, r.stderr)

print(f"{sum(results)}/{len(results)} passed")
sys.exit(0 if all(results) else 1)
