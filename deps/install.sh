#!/usr/bin/env bash
# Installs the Debian packages Rowan builds and tests with. Nothing is vendored:
# every library comes from Debian (see ../shared/DESIGN.md §2).
#
#   deps/install.sh          install what is missing (needs root or sudo)
#   deps/install.sh --check  exit 0 when everything is present, 1 otherwise
set -euo pipefail

BUILD_PKGS="gcc make pkg-config libhiredis-dev libevent-dev libpmem-dev
  libibverbs-dev librdmacm-dev libzookeeper-mt-dev libssl-dev libsystemd-dev
  liblua5.1-0-dev lua-cjson-dev lua-bitop-dev"
TEST_PKGS="redis-server redis-tools python3 python3-redis python3-pytest
  zookeeper clang procps strace openssl python3-rq"
PKGS="$BUILD_PKGS $TEST_PKGS"
# Node.js and npm for the application tests (tests/apps): Debian's nodejs and
# npm, unless a node with its own npm is installed already (NodeSource's
# nodejs package bundles npm, and conflicts with Debian's npm).
command -v npm >/dev/null 2>&1 || PKGS="$PKGS nodejs npm"

missing() {
  local m=""
  for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || m="$m $p"
  done
  echo "$m"
}

m=$(missing)
if [ "${1:-}" = "--check" ]; then
  [ -z "$m" ] && exit 0
  echo "missing Debian packages:$m" >&2
  exit 1
fi
[ -z "$m" ] && exit 0
echo "deps: installing$m"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $m
