#!/usr/bin/env bash
# Outpost installer (docs/install.md). Shipped at the top of the bundle (scripts/bundle.sh) as outpost/install.sh;
# run it as root from the extracted bundle:
#   sudo ./outpost/install.sh                      install or upgrade; keeps /etc/outpost and /var/lib/outpost
#   sudo ./outpost/install.sh --uninstall          remove program, unit and command; keep config, data and user
#   sudo ./outpost/install.sh --uninstall --purge  also remove /etc/outpost, /var/lib/outpost and the user
#   ./outpost/install.sh --root DIR                stage the same tree under DIR (no systemctl, no user, no chown)
# Node: OUTPOST_NODE=/path/to/node picks the Node to check and run (default: `node` on PATH); the daemon and the
# `outpost` command run that exact binary through the /opt/outpost/bin/node link, so upgrading Node in place
# (apt, NodeSource) needs nothing, and moving it needs this script run again.
set -euo pipefail

root=''
mode=install
purge=0
while [ $# -gt 0 ]; do
  case "$1" in
    --root) root=${2:?--root needs a directory}; shift 2 ;;
    --root=*) root=${1#--root=}; shift ;;
    --uninstall) mode=uninstall; shift ;;
    --purge) mode=uninstall; purge=1; shift ;;
    -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "install.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

src=$(cd "$(dirname "$0")" && pwd)
if [ -n "$root" ]; then
  mkdir -p "$root"
  root=$(cd "$root" && pwd)
fi
staging() { [ -n "$root" ]; }
say() { echo "outpost: $*"; }
die() { echo "outpost: $*" >&2; exit 1; }

prefix=/opt/outpost
etc=/etc/outpost
data=/var/lib/outpost
unit=/etc/systemd/system/outpost.service
cmd=/usr/local/bin/outpost

staging || [ "$(id -u)" = 0 ] || die "run as root (sudo $0), or use --root DIR to stage into a directory"

# systemd is running (not merely installed): the check sd_booted() makes.
systemd_up() { ! staging && [ -d /run/systemd/system ] && command -v systemctl >/dev/null; }

if [ "$mode" = uninstall ]; then
  if systemd_up; then
    systemctl disable --now outpost.service >/dev/null 2>&1 || true
  fi
  rm -f "$root$unit" "$root$cmd" "$root$unit.d/10-low-port.conf"
  rmdir "$root$unit.d" 2>/dev/null || true
  if systemd_up; then systemctl daemon-reload; fi
  rm -rf "$root$prefix" "$root$prefix.new" "$root$prefix.old"
  if [ "$purge" = 1 ]; then
    rm -rf "$root$data" "$root$etc"
    if ! staging && id outpost >/dev/null 2>&1; then userdel outpost 2>/dev/null || say "could not remove the user outpost"; fi
    say "removed: program, unit, command, configuration, data and the outpost user"
  else
    say "removed the program, unit and command; kept $etc, $data and the outpost user (--purge removes them)"
  fi
  exit 0
fi

[ -f "$src/bundle.json" ] && [ -f "$src/dist/src/main.js" ] ||
  die "run install.sh from an extracted bundle (scripts/bundle.sh <x64|arm64|armv7> builds one)"

# --- Node: 18-22 (docs/install.md) and one whose native binaries this bundle carries.
node_help() {
  cat >&2 <<'EOF'
outpost: to get a supported Node on Raspberry Pi OS / Debian (bookworm's `apt install nodejs` is 18.19, end of
life and not in the default bundle):
  NodeSource (apt, updates with the system):
    curl -fsSL https://deb.nodesource.com/setup_22.x | sudo -E bash - && sudo apt-get install -y nodejs
  or the official tarball (https://nodejs.org/en/download: "Linux", ARMv8 = arm64, ARMv7 = armv7l):
    tar -xJf node-v22.*-linux-arm64.tar.xz -C /usr/local --strip-components=1
  then run this installer again (OUTPOST_NODE=/path/to/node picks a Node that is not on PATH).
EOF
}
node=${OUTPOST_NODE:-$(command -v node || true)}
[ -n "$node" ] && [ -x "$node" ] || { echo "outpost: Node.js is not installed" >&2; node_help; exit 1; }
node=$(readlink -f "$node")
nodever=$("$node" --version 2>/dev/null || true)
major=${nodever#v}; major=${major%%.*}
# bundle.json is one line that scripts/bundle.sh writes: read without Node, which is not checked yet.
want_arch=$(sed -n 's/.*"nodeArch":"\([^"]*\)".*/\1/p' "$src/bundle.json")
want_majors=$(sed -n 's/.*"nodeMajors":\[\([0-9,]*\)\].*/\1/p' "$src/bundle.json")
case "$major" in
  18|20|21|22) ;;
  *) echo "outpost: Node ${nodever:-?} at $node is not supported: Outpost runs on Node 18 to 22" >&2; node_help; exit 1 ;;
esac
[ -n "$want_arch" ] && [ -n "$want_majors" ] || die "$src/bundle.json does not say nodeArch and nodeMajors"
case ",$want_majors," in
  *",$major,"*) ;;
  *) echo "outpost: this bundle carries native binaries for Node ${want_majors//,/ and }, not for Node $major ($node)" >&2
     node_help; exit 1 ;;
esac
have_arch=$("$node" -p process.arch)
[ "$have_arch" = "$want_arch" ] ||
  die "this bundle is for $want_arch but $node is $have_arch: use outpost-*-linux-$(case $have_arch in arm) echo armv7;; *) echo "$have_arch";; esac).tar.gz"
if [ "$major" = 18 ] || [ "$major" = 21 ]; then say "warning: Node $major is past its end of life; Node 22 is the supported LTS"; fi

# --- The service user (system account, no login, no home).
if ! staging && ! id outpost >/dev/null 2>&1; then
  useradd --system --user-group --no-create-home --home-dir "$data" --shell /usr/sbin/nologin outpost
  say "created the system user outpost"
fi
own() { staging || chown "$@"; }

# --- Program: copied beside the old one, then swapped in, so a failed copy leaves the installed version working.
upgrade=0
[ -d "$root$prefix/dist" ] && upgrade=1
mkdir -p "$root$(dirname "$prefix")"
rm -rf "$root$prefix.new" "$root$prefix.old"
mkdir -p "$root$prefix.new"
(cd "$src" && tar -cf - .) | tar -xf - -C "$root$prefix.new" --no-same-owner
mkdir -p "$root$prefix.new/bin"
ln -sfn "$node" "$root$prefix.new/bin/node"
chmod -R u=rwX,go=rX "$root$prefix.new"
chmod 0755 "$root$prefix.new/install.sh"
[ -d "$root$prefix" ] && mv "$root$prefix" "$root$prefix.old"
mv "$root$prefix.new" "$root$prefix"
rm -rf "$root$prefix.old"

# --- Configuration: created once, never overwritten. Readable by the service (group), not by other users:
# it may hold upstream credentials.
mkdir -p "$root$etc"
chmod 0750 "$root$etc"
own root:outpost "$root$etc"
if [ ! -f "$root$etc/outpost.json" ]; then
  printf '{\n  "port": 8080\n}\n' > "$root$etc/outpost.json"
  chmod 0640 "$root$etc/outpost.json"
  own root:outpost "$root$etc/outpost.json"
  say "wrote $etc/outpost.json (keys: $prefix/docs/configuration.md)"
else
  say "kept $etc/outpost.json"
fi

# --- Data: owned by the service user, private to it (the unit's UMask=0077 keeps new files so).
mkdir -p "$root$data"
chmod 0700 "$root$data"
own outpost:outpost "$root$data"

# --- The `outpost` command. It sets the installed config and data dir (a technician types `outpost status`), and
# run as root it becomes the outpost user: LMDB readers need write access to outpost.mdb-lock, and a file the CLI
# creates in the data dir must stay the daemon's.
mkdir -p "$root$(dirname "$cmd")"
cat > "$root$cmd.tmp" <<EOF
#!/bin/sh
# Installed by $prefix/install.sh: runs the Outpost CLI against the installed gateway.
# Local commands need the data dir, which is the outpost user's alone: use \`sudo outpost ...\`.
# The unit's overrides in /etc/default/outpost (its EnvironmentFile) apply here too; the caller's environment wins.
fromdefault() { [ -r /etc/default/outpost ] && sed -n "s/^[[:space:]]*\$1=[\"']\\{0,1\\}\\([^\"']*\\)[\"']\\{0,1\\}[[:space:]]*\$/\\1/p" /etc/default/outpost | tail -n 1; }
[ -n "\${OUTPOST_DATA_DIR:-}" ] || OUTPOST_DATA_DIR=\$(fromdefault OUTPOST_DATA_DIR)
[ -n "\${OUTPOST_CONFIG:-}" ] || OUTPOST_CONFIG=\$(fromdefault OUTPOST_CONFIG)
export OUTPOST_DATA_DIR="\${OUTPOST_DATA_DIR:-$data}"
if [ -z "\${OUTPOST_CONFIG:-}" ] && [ -r $etc/outpost.json ]; then OUTPOST_CONFIG=$etc/outpost.json; fi
[ -z "\${OUTPOST_CONFIG:-}" ] || export OUTPOST_CONFIG
if [ "\$(id -u)" = 0 ] && id outpost >/dev/null 2>&1; then
  if command -v setpriv >/dev/null; then
    exec setpriv --reuid=outpost --regid=outpost --init-groups -- $prefix/bin/node $prefix/dist/src/main.js "\$@"
  fi
  exec runuser -u outpost -- $prefix/bin/node $prefix/dist/src/main.js "\$@"
fi
$prefix/bin/node $prefix/dist/src/main.js "\$@" && exit 0
rc=\$?
if [ ! -w "\$OUTPOST_DATA_DIR" ] && [ "\$(id -un)" != outpost ]; then
  echo "outpost: hint: \$OUTPOST_DATA_DIR belongs to the outpost user: run this command with sudo" >&2
fi
exit \$rc
EOF
chmod 0755 "$root$cmd.tmp"
mv "$root$cmd.tmp" "$root$cmd"

# --- The unit, and a drop-in granting CAP_NET_BIND_SERVICE only while the config asks for a port below 1024
# (the unit itself has no capabilities; a user namespace cannot bind them on the host, hence PrivateUsers=no).
mkdir -p "$root$(dirname "$unit")"
cp "$src/systemd/outpost.service" "$root$unit.tmp"
chmod 0644 "$root$unit.tmp"
mv "$root$unit.tmp" "$root$unit"
read -r port scheme < <("$node" -e '
  let c = {};
  try { c = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8")); } catch {}
  console.log(c.port ?? 8080, c.tls && c.tls.cert ? "https" : "http");' "$root$etc/outpost.json")
dropin="$root$unit.d/10-low-port.conf"
if [ "$port" -gt 0 ] && [ "$port" -lt 1024 ]; then
  mkdir -p "$(dirname "$dropin")"
  printf '# Written by install.sh: %s has "port": %s\n[Service]\nAmbientCapabilities=CAP_NET_BIND_SERVICE\nCapabilityBoundingSet=CAP_NET_BIND_SERVICE\nPrivateUsers=no\n' \
    "$etc/outpost.json" "$port" > "$dropin"
  chmod 0644 "$dropin"
  say "port $port is below 1024: the unit gets CAP_NET_BIND_SERVICE ($unit.d/10-low-port.conf)"
else
  rm -f "$dropin"
  rmdir "$root$unit.d" 2>/dev/null || true
fi

if systemd_up; then
  systemctl daemon-reload
  systemctl enable outpost.service >/dev/null 2>&1
  if [ "$upgrade" = 1 ]; then systemctl restart outpost.service; else systemctl start outpost.service; fi
  say "service outpost $(systemctl is-active outpost.service 2>/dev/null || true) (journalctl -u outpost)"
elif staging; then
  say "staged into $root (no systemctl, no user creation)"
else
  say "note: systemd is not running here, so the unit is installed but not started;"
  say "      start the daemon by hand (as the unit does): sudo -u outpost MALLOC_ARENA_MAX=2 MALLOC_TRIM_THRESHOLD_=131072 OUTPOST_CONFIG=$etc/outpost.json OUTPOST_DATA_DIR=$data $prefix/bin/node --max-semi-space-size=2 --max-old-space-size=512 $prefix/dist/src/main.js serve"
fi

# --- What next.
host=$(hostname -I 2>/dev/null | awk '{print $1}')
[ -n "$host" ] || host=$(hostname 2>/dev/null || echo localhost)
version=$("$node" -p 'require(process.argv[1]).version' "$root$prefix/package.json")
say "$([ "$upgrade" = 1 ] && echo upgraded || echo installed) Outpost $version ($want_arch, Node $nodever) in $prefix; data in $data"
say "create the first user:"
echo "  sudo outpost user add --email admin@example.com --password '<choose one>' --authority TENANT_ADMIN"
say "then check it with: sudo outpost status --config $etc/outpost.json"
say "the ThingsBoard-compatible API is at $scheme://$host:$port/api/ (devices post to /api/v1/<token>/telemetry; there is no web UI)"
say "documentation: $prefix/docs (cli.md for the outpost command)"
