#!/bin/sh
# Installs every Debian package the Remote Command Service needs to build, run and test.
# This is the one list of dependencies; the README's commands and .ci/run call it.
#   tools/deps.sh run     build and run both daemons
#   tools/deps.sh test    + test tools and the aarch64 cross build run under qemu-user (default)
#   tools/deps.sh armhf   + the 32-bit ARM cross build
set -eu

RUN_PKGS="build-essential cmake pkg-config
libpaho-mqtt-dev liblua5.4-dev libjson-c-dev libsqlite3-dev libmbedtls-dev
libmicrohttpd-dev libcurl4-openssl-dev libseccomp-dev
mosquitto mosquitto-clients curl openssl sqlite3 python3"
TEST_PKGS="libcmocka-dev python3-aiosmtpd python3-paho-mqtt"
# the agent's libraries for a device architecture (Debian multiarch)
target_pkgs() {
	echo "libc6-dev:$1 libpaho-mqtt-dev:$1 liblua5.4-dev:$1 libjson-c-dev:$1"
	echo "libsqlite3-dev:$1 libmbedtls-dev:$1 libseccomp-dev:$1 libssl-dev:$1"
}
ARM64_PKGS="qemu-user gcc-aarch64-linux-gnu $(target_pkgs arm64)"
ARMHF_PKGS="qemu-user gcc-arm-linux-gnueabihf $(target_pkgs armhf)"

what=${1:-test}
foreign=""
case "$what" in
run) pkgs="$RUN_PKGS" ;;
test) pkgs="$RUN_PKGS $TEST_PKGS $ARM64_PKGS"; foreign="arm64" ;;
armhf) pkgs="$RUN_PKGS $TEST_PKGS $ARM64_PKGS $ARMHF_PKGS"; foreign="arm64 armhf" ;;
*) echo "usage: $0 [run|test|armhf]" >&2; exit 2 ;;
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
for arch in $foreign; do
	if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
		$SUDO dpkg --add-architecture "$arch"
	fi
done
echo "installing:$missing" >&2
# A mirror being synced can fail one index now and then: retry, then go on with what we have.
for i in 1 2 3; do
	if $SUDO apt-get update -qq; then
		break
	fi
	echo "apt-get update failed (attempt $i), retrying" >&2
	sleep 5
done
# shellcheck disable=SC2086
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
