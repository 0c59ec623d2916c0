#!/usr/bin/env bash
# Builds the store wire-parser fuzzer (clang, libFuzzer, ASan+UBSan) in build-fuzz/ and runs it for SECONDS
# (default 600), its corpus seeded with one valid frame of every request and reply kind. Crashes are
# written to build-fuzz/findings-store/. Usage: scripts/fuzz_store.sh [SECONDS] [more libFuzzer flags...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
shift || true
build=${BRAID_FUZZ_BUILD:-$root/build-fuzz}

CC=clang CXX=clang++ cmake -S "$root" -B "$build" -G Ninja -DBRAID_FUZZ=ON -DBRAID_WITH_CUDA=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" -j"${BRAID_FUZZ_JOBS:-2}" store_fuzz

corpus=$build/fuzz-corpus-store
findings=$build/findings-store
mkdir -p "$corpus" "$findings"
# Seeds: byte 0 chooses the size limit, then frames (u32 length, body). One per opcode, one reply.
python3 - "$corpus" <<'PY'
import struct, sys, os
d = sys.argv[1]
s = lambda b: struct.pack('<I', len(b)) + b
frame = lambda body: struct.pack('<I', len(body)) + body
seeds = {
  'hello': frame(b'\x01' + struct.pack('<I', 1) + s(b'token')),
  'set': frame(b'\x02' + s(b'key') + s(b'value')),
  'get': frame(b'\x03' + s(b'key')),
  'wait': frame(b'\x04' + struct.pack('<I', 2) + s(b'a') + s(b'b') + struct.pack('<Q', 1000)),
  'add': frame(b'\x05' + s(b'n') + struct.pack('<q', -3)),
  'barrier': frame(b'\x06' + s(b'b') + struct.pack('<I', 4) + struct.pack('<Q', 5000)),
  'delete': frame(b'\x07' + s(b'k')),
  'age': frame(b'\x08' + s(b'hb')),
  'reply': frame(b'\x02' + s(b'a, b')),
}
seeds['stream'] = seeds['hello'] + seeds['set'] + seeds['wait']
for name, body in seeds.items():
  for lim in (b'\x00', b'\xff'):
    open(os.path.join(d, f'seed_{name}_{lim.hex()}'), 'wb').write(lim + body)
PY

cd "$findings"
exec "$build/fuzz/store_fuzz" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 "$@"
