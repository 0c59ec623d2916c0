#!/usr/bin/env bash
# Builds the rendezvous store's fuzzers (clang, libFuzzer, ASan+UBSan) in build-fuzz/ and runs each for SECONDS
# (default 600): store_fuzz over the frame splitter and both parsers (pure functions), store_server_fuzz over a
# live server in this process on 127.0.0.1 (authentication, deadlines, eviction, oversized frames, half-open
# connections). BRAID_FUZZ_TARGET=store_fuzz or store_server_fuzz runs one. Crashes are written to
# build-fuzz/findings-<target>/. Usage: scripts/fuzz_store.sh [SECONDS] [more libFuzzer flags...]
# The targets are compiled here from their few sources (store_protocol, store, core/error: no braid_core, so
# no core/half.h), with clang's own flags, not through the top-level CMakeLists (whose vectoriser flags are
# GCC's); fuzz/CMakeLists.txt declares the same targets for a BRAID_FUZZ=ON build.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-600}
shift || true
build=${BRAID_FUZZ_BUILD:-$root/build-fuzz}
targets=${BRAID_FUZZ_TARGET:-store_fuzz store_server_fuzz}
cxx=${CXX:-clang++}
mkdir -p "$build"

flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -I"$root/src" -pthread)
build_target() {  # name, sources...
  local name=$1
  shift
  local out=$build/$name newest
  newest=$(ls -t "$@" "$root/src/distributed/store.h" "$root/src/distributed/store_protocol.h" "$root/src/core/error.h" | head -1)
  if [[ ! -x $out || $newest -nt $out ]]; then
    echo "building $out" >&2
    "$cxx" "${flags[@]}" "$@" -o "$out"
  fi
}
build_target store_fuzz "$root/fuzz/store_fuzz.cpp" "$root/src/distributed/store_protocol.cpp" "$root/src/core/error.cpp"
build_target store_server_fuzz "$root/fuzz/store_server_fuzz.cpp" "$root/src/distributed/store.cpp" \
  "$root/src/distributed/store_protocol.cpp" "$root/src/core/error.cpp"

for target in $targets; do
  corpus=$build/fuzz-corpus-$target
  findings=$build/findings-$target
  mkdir -p "$corpus" "$findings"
  if [[ $target == store_fuzz ]]; then
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
  else
    # Seeds: action scripts (op byte, connection byte, arguments; fuzz/store_server_fuzz.cpp): connect, hello,
    # requests, read; a wrong token; an oversized prefix; a half-close; a pause past the handshake deadline.
    python3 - "$corpus" <<'PY'
import os, sys
d = sys.argv[1]
seeds = {
  'hello_requests': bytes([0, 0, 2, 0, 11, 0, 4, 0, 0, 3, 0x6b, 0x65, 0x79, 1, 0x76, 11, 0, 4, 0, 1, 3, 0x6b, 0x65, 0x79, 11, 0]),
  'wrong_token': bytes([0, 0, 3, 0, 1, 5, 0x67, 0x75, 0x65, 0x73, 0x73, 11, 0]),
  'oversized': bytes([0, 0, 7, 0, 0xff, 0xff, 12, 0x41, 11, 0, 1, 0, 2, 1, 11, 1]),
  'half_open': bytes([0, 0, 2, 0, 8, 0, 11, 0, 0, 0, 8, 1, 11, 1]),
  'slow_hello': bytes([0, 0, 6, 0, 3, 1, 2, 3, 10, 0, 180, 11, 0]),
  'evict': bytes([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 5, 11, 5, 11, 0]),
  'reset': bytes([0, 0, 2, 0, 9, 0, 1, 0, 0, 4, 1, 2, 1, 0, 1, 0, 9, 1, 0]),
}
for name, b in seeds.items():
  open(os.path.join(d, 'seed_' + name), 'wb').write(b)
PY
  fi
  # The server's inputs are scripts of at most 48 actions (a few hundred bytes), each run taking milliseconds:
  # the whole length from the start, instead of libFuzzer's slowly growing limit.
  lengths=(-max_len=4096)
  [[ $target == store_server_fuzz ]] && lengths=(-max_len=1024 -len_control=0)
  (cd "$findings" && "$build/$target" "$corpus" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    "${lengths[@]}" -print_final_stats=1 "$@")
done
