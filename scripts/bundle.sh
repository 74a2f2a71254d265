#!/usr/bin/env bash
# Offline install bundle for one gateway architecture (docs/install.md), built on any Linux machine:
#   scripts/bundle.sh <x64|arm64|armv7> [--node 20,22] [--out DIR] [--no-build]
# writes DIR/outpost-<version>-linux-<arch>.tar.gz (DIR defaults to build/) with one top folder outpost/:
# dist/src, package.json, production node_modules holding only that architecture's native binaries, the unit,
# install.sh, README.md, docs/ and bundle.json (arch and Node majors, read by install.sh). The gateway needs neither a
# compiler nor the network.
#
# --node: the Node majors whose native binaries are kept (uWebSockets.js ships one 5-7 MB binary per platform and
# Node ABI; lmdb one per ABI plus an N-API fallback). Default 20,22, the LTS lines, which keeps an arm64 bundle
# under 10 MB compressed; --node 18,20,21,22 covers every Node the code runs on, at ~14 MB.
# --no-build: use the dist/ already compiled (the test suite does, so it never rewrites dist/ under itself).
# npm settings come from the environment as usual (e.g. npm_config_offline=true to build from npm's cache).
set -euo pipefail

usage() { echo "usage: scripts/bundle.sh <x64|arm64|armv7> [--node 20,22] [--out DIR] [--no-build]" >&2; exit 2; }

repo=$(cd "$(dirname "$0")/.." && pwd)
arch=${1:-}; shift || true
majors=20,22
out="$repo/build"
build=1
while [ $# -gt 0 ]; do
  case "$1" in
    --node) majors=${2:?--node needs a list, e.g. 20,22}; shift 2 ;;
    --out) out=${2:?--out needs a directory}; shift 2 ;;
    --no-build) build=0; shift ;;
    *) usage ;;
  esac
done

# npm's --cpu and Node's process.arch name 32-bit ARM "arm"; the bundle says armv7 (what Raspberry Pi OS 32-bit
# runs: ARMv7 hard-float, also on an ARMv8 board with a 32-bit userland).
case "$arch" in
  x64) cpu=x64 ;;
  arm64) cpu=arm64 ;;
  armv7) cpu=arm ;;
  *) usage ;;
esac

# Node major -> ABI (process.versions.modules), the number in the native binaries' file names.
abis=()
for m in ${majors//,/ }; do
  case "$m" in
    18) abis+=(108) ;; 20) abis+=(115) ;; 21) abis+=(120) ;; 22) abis+=(127) ;;
    *) echo "bundle.sh: Node $m is not supported (18, 20, 21 or 22)" >&2; exit 2 ;;
  esac
done

cd "$repo"
version=$(node -p 'require("./package.json").version')
if [ "$build" = 1 ]; then npx tsc -p .; fi
[ -f dist/src/main.js ] || { echo "bundle.sh: dist/src/main.js is missing: run npm install (or drop --no-build)" >&2; exit 1; }

stage=$(mktemp -d "${TMPDIR:-/tmp}/outpost-bundle.XXXXXX")
trap 'rm -rf "$stage"' EXIT
top="$stage/outpost"
mkdir -p "$top/dist" "$top/systemd"

# Production dependencies for the target, exactly as locked. --ignore-scripts: lmdb's and msgpackr-extract's
# install scripts would probe (or try to compile) the prebuilt binary on this machine's architecture.
cp package.json package-lock.json "$top/"
(cd "$top" && npm ci --omit=dev --cpu="$cpu" --os=linux --ignore-scripts --no-audit --no-fund --loglevel=error)
rm "$top/package-lock.json"

nm="$top/node_modules"
# Keep only what the target can load: uWS's binaries for this platform and the chosen ABIs; lmdb's and
# msgpackr-extract's glibc builds (Raspberry Pi OS is glibc) for those ABIs, plus their N-API build where one
# of the chosen ABIs has no ABI-specific file (node-gyp-build prefers the ABI-specific one).
keep_uws=(); for a in "${abis[@]}"; do keep_uws+=("uws_linux_${cpu}_${a}.node"); done
for f in "$nm"/uWebSockets.js/dist/bin/*.node; do
  b=$(basename "$f"); k=0
  for w in "${keep_uws[@]}"; do [ "$b" = "$w" ] && k=1; done
  [ "$k" = 1 ] || rm "$f"
done
for d in "$nm"/@lmdb/lmdb-linux-* "$nm"/@msgpackr-extract/msgpackr-extract-linux-*; do
  [ -d "$d" ] || continue
  rm -f "$d"/*.musl.node
  need_napi=0
  for a in "${abis[@]}"; do [ -f "$d/node.abi$a.glibc.node" ] || need_napi=1; done
  for f in "$d"/node.abi*.glibc.node; do
    [ -f "$f" ] || continue
    a=${f##*/node.abi}; a=${a%%.*}; k=0
    for w in "${abis[@]}"; do [ "$a" = "$w" ] && k=1; done
    [ "$k" = 1 ] || rm "$f"
  done
  [ "$need_napi" = 1 ] || rm -f "$d"/node.napi.glibc.node
done
# Sources and headers for building natively, TypeScript sources and declarations (MQTT.js's timer dependencies
# ship their src/), docs and source maps: nothing the gateway runs.
rm -rf "$nm"/lmdb/dependencies "$nm"/lmdb/src "$nm"/msgpackr-extract/src "$nm"/node-addon-api/*.h "$nm"/.package-lock.json
find "$nm" -type f \( -name '*.ts' -o -name '*.cts' -o -name '*.mts' -o -name '*.map' -o -name '*.md' \
  -o -name 'binding.gyp' -o -name 'rollup.config.js' -o -name 'benchmark*' -o -name 'test-worker.js' \) -delete
for b in "${keep_uws[@]}"; do
  [ -f "$nm/uWebSockets.js/dist/bin/$b" ] || { echo "bundle.sh: uws-pack has no $b" >&2; exit 1; }
done

# The daemon and CLI (not the tests, benches or source maps).
cp -r dist/src "$top/dist/src"
find "$top/dist" -name '*.map' -delete
cp systemd/outpost.service "$top/systemd/"
cp scripts/install.sh "$top/install.sh"
chmod 0755 "$top/install.sh"
cp README.md "$top/"
cp -r docs "$top/docs"
node -e '
  const [version, arch, cpu, majors] = process.argv.slice(1);
  process.stdout.write(JSON.stringify({ version, arch, nodeArch: cpu, nodeMajors: majors.split(",").map(Number) }) + "\n");
' "$version" "$arch" "$cpu" "$majors" > "$top/bundle.json"

# Reproducible archive: sorted names, fixed owner and mtime (the last commit's), gzip without a timestamp.
mtime=$(git log -1 --format=%ct 2>/dev/null || echo 0)
mkdir -p "$out"
tarball="$out/outpost-$version-linux-$arch.tar.gz"
tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$mtime" -cf - outpost | gzip -9n > "$tarball.tmp"
mv "$tarball.tmp" "$tarball"
echo "$tarball $(stat -c %s "$tarball") bytes ($(du -sk "$top" | cut -f1) KiB unpacked; Node ${majors})"
