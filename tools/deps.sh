#!/bin/sh
# Installs every Debian package the Remote Command Service needs to build, run and test.
# This is the one list of dependencies; the README's commands and .ci/run call it.
#   tools/deps.sh run     build and run both daemons
#   tools/deps.sh test    + test tools and both cross builds of the agent, run under qemu-user
#                           (aarch64 and 32-bit ARM) (default)
#   tools/deps.sh bench   + the benchmarks' tools (tests/bench/, BENCHMARKS.md): wrk, and nginx
#                           as the REST baseline (the benchmark starts its own nginx with its
#                           own config on a free port; it never uses the system service)
set -eu

RUN_PKGS="build-essential cmake pkg-config
libpaho-mqtt-dev liblua5.4-dev libjson-c-dev libsqlite3-dev libmbedtls-dev
libmicrohttpd-dev libcurl4-openssl-dev libseccomp-dev
mosquitto mosquitto-clients curl openssl sqlite3 python3"
TEST_PKGS="libcmocka-dev python3-aiosmtpd python3-paho-mqtt libfaketime"
# aarch64: the agent's libraries as Debian multiarch packages
ARM64_PKGS="qemu-user gcc-aarch64-linux-gnu libc6-dev:arm64 libpaho-mqtt-dev:arm64
liblua5.4-dev:arm64 libjson-c-dev:arm64 libsqlite3-dev:arm64 libmbedtls-dev:arm64
libseccomp-dev:arm64 libssl-dev:arm64"
# 32-bit ARM: the cross compiler with its C library; the agent's armhf libraries are unpacked
# into a sysroot (below) rather than installed, so that a mirror whose armhf and amd64 indexes
# disagree on a shared library's version (libssl3 from bookworm-security, say) can't block it.
ARMHF_PKGS="gcc-arm-linux-gnueabihf libc6-dev-armhf-cross"
ARMHF_DEBS="libpaho-mqtt-dev libpaho-mqtt1.3 libssl-dev libssl3 liblua5.4-dev liblua5.4-0
libjson-c-dev libjson-c5 libsqlite3-dev libsqlite3-0 libmbedtls-dev libmbedtls14
libmbedx509-1 libmbedcrypto7 libseccomp-dev libseccomp2"
ARMHF_SYSROOT=${RCS_SYSROOT:-/opt/rcs-sysroot/arm-linux-gnueabihf}
# wrk embeds LuaJIT for its request scripts: no Lua package needed for them
BENCH_PKGS="wrk nginx-light"

what=${1:-test}
foreign=""
sysroot=""
case "$what" in
run) pkgs="$RUN_PKGS" ;;
test | armhf) pkgs="$RUN_PKGS $TEST_PKGS $ARM64_PKGS $ARMHF_PKGS"; foreign="arm64 armhf"; sysroot=1 ;;
bench)
	pkgs="$RUN_PKGS $TEST_PKGS $ARM64_PKGS $ARMHF_PKGS $BENCH_PKGS"
	foreign="arm64 armhf"
	sysroot=1
	;;
*) echo "usage: $0 [run|test|bench]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
want_sysroot=""
if [ -n "$sysroot" ]; then
	stamp="$ARMHF_SYSROOT/.rcs-debs"
	if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$(echo $ARMHF_DEBS)" ]; then
		want_sysroot=1
	fi
fi
[ -z "$missing" ] && [ -z "$want_sysroot" ] && exit 0

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
for arch in $foreign; do
	if ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
		$SUDO dpkg --add-architecture "$arch"
	fi
done
echo "installing:$missing${want_sysroot:+ (and the armhf sysroot $ARMHF_SYSROOT)}" >&2
# A mirror being synced can fail one index now and then: retry, then go on with what we have.
for i in 1 2 3; do
	if $SUDO apt-get update -qq; then
		break
	fi
	echo "apt-get update failed (attempt $i), retrying" >&2
	sleep 5
done
if [ -n "$missing" ]; then
	# shellcheck disable=SC2086
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
		$missing >/dev/null
fi
if [ -n "$want_sysroot" ]; then
	dl=$(mktemp -d)
	chmod 755 "$dl"
	# shellcheck disable=SC2046
	(cd "$dl" && apt-get download -q $(for d in $ARMHF_DEBS; do echo "$d:armhf"; done) \
		2>&1 | grep -v "^W: Download is performed unsandboxed" >&2 || true)
	n=$(find "$dl" -name '*.deb' | wc -l)
	if [ "$n" -ne "$(echo $ARMHF_DEBS | wc -w)" ]; then
		echo "could not download the armhf libraries ($n .deb files)" >&2
		rm -rf "$dl"
		exit 1
	fi
	$SUDO rm -rf "$ARMHF_SYSROOT"
	$SUDO mkdir -p "$ARMHF_SYSROOT"
	for d in "$dl"/*.deb; do
		$SUDO dpkg-deb -x "$d" "$ARMHF_SYSROOT"
	done
	echo $ARMHF_DEBS | $SUDO tee "$ARMHF_SYSROOT/.rcs-debs" >/dev/null
	rm -rf "$dl"
fi
