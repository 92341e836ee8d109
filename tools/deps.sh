#!/bin/sh
# Installs every Debian package the Remote Command Service needs to build, run and test.
# This is the one list of dependencies; the README's commands and .ci/run call it.
# Usage: tools/deps.sh [run|test|cross]   (default: test, which includes run)
set -eu

RUN_PKGS="build-essential cmake pkg-config
libpaho-mqtt-dev liblua5.4-dev libjson-c-dev libsqlite3-dev libmbedtls-dev
libmicrohttpd-dev libcurl4-openssl-dev libseccomp-dev
mosquitto mosquitto-clients curl openssl sqlite3 python3"
TEST_PKGS="libcmocka-dev python3-aiosmtpd python3-paho-mqtt"
CROSS_PKGS="qemu-user gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf"

what=${1:-test}
case "$what" in
run) pkgs="$RUN_PKGS" ;;
test) pkgs="$RUN_PKGS $TEST_PKGS" ;;
cross) pkgs="$RUN_PKGS $TEST_PKGS $CROSS_PKGS" ;;
*) echo "usage: $0 [run|test|cross]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing:$missing" >&2
$SUDO apt-get update -qq
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
