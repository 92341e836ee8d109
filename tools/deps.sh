#!/bin/sh
# Installs every Debian package the Remote Command Service needs to build, run and test.
# This is the one list of dependencies; the README's commands and .ci/run call it.
#   tools/deps.sh run       build and run both daemons
#   tools/deps.sh test      + the test tools, and both cross builds of the agent (aarch64 and
#                             32-bit ARM): cross compilers, qemu-user and the sysroots (default);
#                             Debian's chromium, chromedriver and python3-selenium, which drive
#                             the dashboard in a headless browser (test_dashboard.py);
#                             Redocly's CLI, which lints docs/openapi.json (below); what
#                             tools/package.sh and its tests use (lintian, debootstrap,
#                             systemd-analyze, systemd-nspawn)
#   tools/deps.sh bench     + the benchmarks' tools (tests/bench/, BENCHMARKS.md): wrk, and nginx
#                             as the REST baseline (the benchmark starts its own nginx with its
#                             own config on a free port; it never uses the system service)
#   tools/deps.sh fuzz      + clang with its libFuzzer runtime (tools/fuzz.sh)
#   tools/deps.sh sysroots  only the cross sysroots
#   tools/deps.sh check     checks the cross sysroots (what the toolchain files need, and every
#                             library finding the libraries it loads); exit 1 naming what's wrong
#
# The cross sysroots (toolchains/cross-sysroot.cmake) are unpacked from the target's Debian
# packages: apt-get download with a private apt state for that architecture, then dpkg-deb -x.
# Nothing of a foreign architecture is installed and no foreign architecture is added to dpkg,
# so a mirror whose arm64 or armhf index lags the amd64 one can't break the install.
# A sysroot is made again when SYSROOT_DEBS changes. RCS_SYSROOT_DIR puts them elsewhere than
# /opt/rcs-sysroot (the toolchain files read the same variable).
set -eu
tools=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/lib.sh
. "$tools/lib.sh"

RUN_PKGS="build-essential cmake pkg-config
libpaho-mqtt-dev liblua5.4-dev libjson-c-dev libsqlite3-dev libmbedtls-dev
libmicrohttpd-dev libcurl4-openssl-dev libseccomp-dev libsystemd-dev libpq-dev
mosquitto mosquitto-clients curl openssl jq sqlite3 python3"
# libpq-dev: the coordinator's PostgreSQL backend (--db postgresql://...), built when
# pkg-config finds libpq (cmake -DWITH_POSTGRES=AUTO, the default; ON requires it, OFF leaves
# it out: the cross builds, whose sysroots hold no libpq, build without it).
# Every program the tests call is here or in RUN_PKGS (file: test_agent_qemu.py; time: the
# peak RSS of an rcs upload, test_rcs_cli.py; postgresql:
# the server the store's .pg tests start as their own, tests/integration/pg_server.py).
TEST_PKGS="postgresql libcmocka-dev python3-aiosmtpd python3-paho-mqtt python3-prometheus-client prometheus libfaketime file time
qemu-user gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf
dpkg-dev lintian debootstrap systemd systemd-container man-db
chromium chromium-driver python3-selenium"
# clang-format: .ci/run's check of the C sources' style (tools/check-format.sh, the
# repository's .clang-format; Debian's is clang-format 14)
TEST_PKGS="$TEST_PKGS clang-format"
# nats-server: the 3-node broker cluster with MQTT the NATS tests start as their own
# (tests/integration/nats_cluster.py, docs/scale-out.md)
TEST_PKGS="$TEST_PKGS nats-server"
# What each cross sysroot holds: the target's C library (its loader too: qemu-user runs the
# agent with it), and the agent's libraries, -dev and runtime, with every library they load.
# `tools/deps.sh check` fails when a library here loads one that is not.
SYSROOT_DEBS="libc6 libc6-dev linux-libc-dev libgcc-s1 libstdc++6
libpaho-mqtt-dev libpaho-mqtt1.3 libssl-dev libssl3 liblua5.4-dev liblua5.4-0
libjson-c-dev libjson-c5 libsqlite3-dev libsqlite3-0 libmbedtls-dev libmbedtls14
libmbedx509-1 libmbedcrypto7 libseccomp-dev libseccomp2
libsystemd-dev libsystemd0 libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1"
# libcurl and every library it loads: the agent's artifacts over HTTP (WITH_ARTIFACT_HTTP,
# docs/agent.md "Artifacts"), in every sysroot (arm64's through SYSROOT_COORD_DEBS)
SYSROOT_CURL_DEBS="libcurl4-openssl-dev libcurl4
libgnutls30 libnettle8 libhogweed6 libgmp10 libp11-kit0 libffi8 libtasn1-6 libidn2-0
libunistring2 libbrotli1 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2
libkeyutils1 libldap-2.5-0 libsasl2-2 libsasl2-modules-db libdb5.3 libnghttp2-14 libpsl5
librtmp1 libssh2-1 zlib1g"
# The coordinator's libraries too, for the architectures of SYSROOT_COORD_ARCHES (the
# rcs-coordinator package of tools/package.sh; the -dev packages of gnutls and of what its
# gnutls.pc requires, for pkg-config to take libmicrohttpd.pc)
SYSROOT_COORD_DEBS="libmicrohttpd-dev libmicrohttpd12 $SYSROOT_CURL_DEBS
libgnutls28-dev nettle-dev libtasn1-6-dev libidn2-dev libp11-kit-dev"
SYSROOT_COORD_ARCHES="arm64"
# Debian architecture : GNU triplet (the toolchain file's name)
SYSROOT_ARCHES="arm64:aarch64-linux-gnu armhf:arm-linux-gnueabihf"
# Files the toolchain files and the agent's build take from a sysroot (T = the triplet)
SYSROOT_NEEDS="usr/lib/T/crt1.o usr/lib/T/libc.so usr/include/stdio.h
usr/lib/T/pkgconfig/json-c.pc usr/lib/T/pkgconfig/sqlite3.pc usr/lib/T/pkgconfig/lua5.4.pc
usr/lib/T/pkgconfig/libseccomp.pc usr/include/MQTTAsync.h usr/lib/T/libpaho-mqtt3as.so
usr/lib/T/libpaho-mqtt3a.so usr/include/mbedtls/pk.h usr/lib/T/libmbedcrypto.so"
SYSROOT_DIR=${RCS_SYSROOT_DIR:-/opt/rcs-sysroot}
# Redocly's CLI (tests/integration/test_openapi_lint.py) comes from npm: `npm ci` installs the
# tree tools/redocly/package-lock.json pins (@redocly/cli 1.34.5 and versions of its packages
# whose engines take bookworm's node 18) into RCS_NODE_DIR (/opt/rcs-node), again only when
# that lock file changes. Debian's nodejs and npm are installed unless node and npm are there
# already (NodeSource's nodejs, say, holds npm and conflicts with Debian's npm package).
NODE_PKGS="nodejs npm"
NODE_DIR=${RCS_NODE_DIR:-/opt/rcs-node}
# wrk embeds LuaJIT for its request scripts: no Lua package needed for them; matplotlib draws
# the plots of bench_scale.py, valgrind (callgrind) counts instructions per job; libmosquitto
# is the comparison client of the fan-out's floors (mqttfloor --client mosquitto)
BENCH_PKGS="wrk nginx-light python3-matplotlib valgrind libmosquitto-dev"
FUZZ_PKGS="clang libclang-rt-dev"

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
say() { echo "deps.sh: $*" >&2; }

# apt_update [APT OPTIONS...]: apt-get update, tried three times. An index that still fails
# (a mirror being synced answers "Hash Sum mismatch" / "Mirror sync in progress?" for a
# while) is skipped with a word: the install goes on with the indexes there are, and fails
# later, naming the package, only if a package it needs is in none of them.
apt_update() {
	log=$(mktemp "${TMPDIR:-/tmp}/rcs-apt-update.XXXXXX")
	for i in 1 2 3; do
		if $SUDO apt-get "$@" update >"$log" 2>&1; then
			rm -f "$log"
			return 0
		fi
		[ "$i" -lt 3 ] && sleep 5
	done
	say "apt-get update failed three times; going on with the indexes there are. Skipped:"
	skipped=$(grep -E '^(E|W): (Failed to fetch|Some index files)|Hash Sum|Mirror sync' "$log" ||
		tail -n 5 "$log")
	echo "$skipped" | sed 's/^/    /' >&2
	rm -f "$log"
}

# ---- the cross sysroots ----

# sysroot_debs ARCH: the packages of ARCH's sysroot
sysroot_debs() {
	case " $SYSROOT_COORD_ARCHES " in
	*" $1 "*) echo $SYSROOT_DEBS $SYSROOT_COORD_DEBS ;;
	*) echo $SYSROOT_DEBS $SYSROOT_CURL_DEBS ;;
	esac
}

# shellcheck disable=SC2086
sysroot_stamp() { echo "$1" dpkg-db $(sysroot_debs "$1"); }

# sysroot_check TRIPLET DIR: every file the toolchain needs is there, and every shared library
# in it finds each library it loads (DT_NEEDED) in the sysroot. Prints what's wrong.
sysroot_check() {
	t=$1 sr=$2 bad=0
	for f in $SYSROOT_NEEDS; do
		f=$(echo "$f" | sed "s|/T/|/$t/|g")
		if [ ! -e "$sr/$f" ]; then
			echo "$sr: no $f"
			bad=1
		fi
	done
	libs=$(find "$sr/lib" "$sr/usr/lib" -name '*.so*' -type f 2>/dev/null)
	for so in $libs; do
		for n in $(readelf -d "$so" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
			# $ORIGIN first: gconv's modules load their tables from their own folder
			for d in "$(dirname "$so")" "$sr/lib/$t" "$sr/usr/lib/$t" "$sr/lib"; do
				[ -e "$d/$n" ] && continue 2
			done
			echo "$sr: ${so#"$sr"/} loads $n, which no package of SYSROOT_DEBS holds"
			bad=1
		done
	done
	return $bad
}

# sysroot_dpkg_db DEB ADMINDIR ROOT ARCH: records DEB, unpacked under ROOT, in a dpkg
# database of the sysroot's own (ADMINDIR: status, info/<package>.list, shlibs, symbols),
# so that dpkg-shlibdeps computes a cross-built package's Depends from the sysroot's
# libraries (DPKG_ADMINDIR, tools/package.sh). Nothing is installed.
sysroot_dpkg_db() {
	deb=$1 adm=$2 root=$3 arch=$4
	$SUDO mkdir -p "$adm/info" "$adm/updates"
	[ -f "$adm/arch" ] || printf '%s\n%s\n' "$(dpkg --print-architecture)" "$arch" |
		$SUDO tee "$adm/arch" >/dev/null
	[ -f "$adm/status" ] || $SUDO touch "$adm/status"
	# format 1: the info files of Multi-Arch: same packages are named <package>:<arch>.*
	[ -f "$adm/info/format" ] || echo 1 | $SUDO tee "$adm/info/format" >/dev/null
	pkg=$(dpkg-deb -f "$deb" Package)
	name=$pkg
	[ "$(dpkg-deb -f "$deb" Multi-Arch)" = same ] && name="$pkg:$arch"
	ctl=$(mktemp -d "${TMPDIR:-/tmp}/rcs-ctl.XXXXXX")
	dpkg-deb -e "$deb" "$ctl"
	for f in shlibs symbols; do
		[ -f "$ctl/$f" ] && $SUDO cp "$ctl/$f" "$adm/info/$name.$f"
	done
	dpkg-deb --fsys-tarfile "$deb" | tar -t | sed -e 's|^\./|/|' -e 's|/$||' -e '/^$/d' \
		-e "s|^|$root|" | $SUDO tee "$adm/info/$name.list" >/dev/null
	{
		sed '/^Package:/a Status: install ok installed' "$ctl/control"
		echo
	} | $SUDO tee -a "$adm/status" >/dev/null
	rm -rf "$ctl"
}

# sysroot_make ARCH TRIPLET: downloads SYSROOT_DEBS for ARCH with a private apt state (kept
# in $SYSROOT_DIR/.apt/ARCH: the system's sources, that architecture only, nothing installed),
# unpacks them into a new folder, makes absolute symbolic links relative to the sysroot,
# checks it, then puts it in place of the old one.
sysroot_make() {
	arch=$1 t=$2
	st="$SYSROOT_DIR/.apt/$arch"
	$SUDO mkdir -p "$st/lists/partial" "$st/cache/archives/partial"
	$SUDO touch "$st/status"
	set -- -o "Dir::State::Lists=$st/lists" -o "Dir::Cache=$st/cache" \
		-o "Dir::State::status=$st/status" -o "APT::Architecture=$arch" \
		-o "APT::Architectures::=$arch" -o "APT::Sandbox::User=root" -o "Debug::NoLocking=1" \
		-o "Acquire::Retries=3"
	say "making the $arch sysroot $SYSROOT_DIR/$t from Debian's $arch packages"
	apt_update "$@"
	dl=$($SUDO mktemp -d "$SYSROOT_DIR/.download-$arch.XXXXXX")
	left=$(sysroot_debs "$arch")
	for i in 1 2 3; do
		# shellcheck disable=SC2086
		if ! (cd "$dl" && $SUDO apt-get "$@" download $left) >"$dl.log" 2>&1; then
			# a package no index knows fails the whole command: leave it out of the next try
			known=""
			for p in $left; do
				apt-cache "$@" show "$p" >/dev/null 2>&1 && known="$known $p"
			done
			if [ -n "$known" ]; then
				# shellcheck disable=SC2086
				(cd "$dl" && $SUDO apt-get "$@" download $known) >>"$dl.log" 2>&1 || true
			fi
		fi
		still=""
		for p in $left; do
			ls "$dl/${p}_"*.deb >/dev/null 2>&1 || still="$still $p"
		done
		left=$still
		[ -z "$left" ] && break
		[ "$i" -lt 3 ] && sleep 5
	done
	if [ -n "$left" ]; then
		for p in $left; do
			if apt-cache "$@" show "$p" >/dev/null 2>&1; then
				say "could not download $p:$arch from the archive (tried three times)"
			else
				say "$p:$arch is in none of the $arch indexes apt could read"
			fi
		done
		tail -n 5 "$dl.log" | sed 's/^/    /' >&2
		say "fix: check that this machine reaches its Debian mirror (/etc/apt/sources.list.d/)" \
			"and run tools/deps.sh again; or make the sysroot by hand (docs/agent.md," \
			"Cross-compiling) and pass -DRCS_SYSROOT=<dir> to CMake"
		$SUDO rm -rf "$dl" "$dl.log"
		return 1
	fi
	new="$SYSROOT_DIR/.new-$t"
	$SUDO rm -rf "$new"
	$SUDO mkdir -p "$new"
	for d in "$dl"/*.deb; do
		$SUDO dpkg-deb -x "$d" "$new"
		sysroot_dpkg_db "$d" "$new/.dpkg" "$SYSROOT_DIR/$t" "$arch"
	done
	$SUDO rm -rf "$dl" "$dl.log"
	# libc6-dev's libm.so -> /lib/<triplet>/libm.so.6 and the like: inside the sysroot
	find "$new" -type l -lname '/*' | while read -r l; do
		$SUDO ln -sfn --relative "$new$(readlink "$l")" "$l"
	done
	if ! sysroot_check "$t" "$new" >&2; then
		say "the $arch sysroot is incomplete (above): add the package holding it to SYSROOT_DEBS"
		$SUDO rm -rf "$new"
		return 1
	fi
	sysroot_stamp "$arch" | $SUDO tee "$new/.rcs-debs" >/dev/null
	$SUDO rm -rf "$SYSROOT_DIR/.old-$t"
	[ -d "$SYSROOT_DIR/$t" ] && $SUDO mv "$SYSROOT_DIR/$t" "$SYSROOT_DIR/.old-$t"
	$SUDO mv "$new" "$SYSROOT_DIR/$t"
	$SUDO rm -rf "$SYSROOT_DIR/.old-$t"
}

# sysroots_wanted: the "arch:triplet" pairs whose sysroot is missing or made from another list
sysroots_wanted() {
	for at in $SYSROOT_ARCHES; do
		stamp="$SYSROOT_DIR/${at#*:}/.rcs-debs"
		if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$(sysroot_stamp "${at%%:*}")" ]; then
			echo "$at"
		fi
	done
}

# ---- Redocly's CLI ----

# redocly_wanted: true when NODE_DIR lacks the CLI or holds another lock's tree
redocly_wanted() {
	! { [ -x "$NODE_DIR/node_modules/.bin/redocly" ] &&
		cmp -s "$tools/redocly/package-lock.json" "$NODE_DIR/.rcs-lock"; }
}

redocly_install() {
	say "installing Redocly's CLI into $NODE_DIR (npm ci from tools/redocly/package-lock.json)"
	$SUDO mkdir -p "$NODE_DIR"
	$SUDO rm -f "$NODE_DIR/.rcs-lock"
	$SUDO cp "$tools/redocly/package.json" "$tools/redocly/package-lock.json" "$NODE_DIR/"
	# --ignore-scripts: the linter needs none of its packages' install scripts
	# shellcheck disable=SC2016
	rcs_step "installing Redocly's CLI (npm ci in $NODE_DIR)" $SUDO sh -c \
		'cd "$1" && npm ci --no-audit --no-fund --ignore-scripts' sh "$NODE_DIR" || return 1
	$SUDO cp "$tools/redocly/package-lock.json" "$NODE_DIR/.rcs-lock"
}

what=${1:-test}
sysroots=""
redocly=""
case "$what" in
run) pkgs="$RUN_PKGS" ;;
test | bench)
	pkgs="$RUN_PKGS $TEST_PKGS"
	[ "$what" = bench ] && pkgs="$pkgs $BENCH_PKGS"
	sysroots=$(sysroots_wanted)
	if redocly_wanted; then
		redocly=yes
		if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
			pkgs="$pkgs $NODE_PKGS"
		fi
	fi
	;;
fuzz) pkgs="$RUN_PKGS $FUZZ_PKGS" ;;
sysroots) pkgs=""; sysroots=$(sysroots_wanted) ;;
check)
	failed=0
	for at in $SYSROOT_ARCHES; do
		t=${at#*:}
		stamp="$SYSROOT_DIR/$t/.rcs-debs"
		if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$(sysroot_stamp "${at%%:*}")" ]; then
			echo "$SYSROOT_DIR/$t: not made from the list in tools/deps.sh (tools/deps.sh test makes it)"
			failed=1
		fi
		sysroot_check "$t" "$SYSROOT_DIR/$t" || failed=1
	done
	exit $failed
	;;
*) echo "usage: $0 [run|test|bench|fuzz|sysroots|check]" >&2; exit 2 ;;
esac

missing=""
for p in $pkgs; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && [ -z "$sysroots" ] && [ -z "$redocly" ] && exit 0

if [ -n "$sysroots" ] && [ ! -f "$SYSROOT_DIR/.foreign-before" ]; then
	# what dpkg had before the first sysroot, for the test that we never add one
	$SUDO mkdir -p "$SYSROOT_DIR"
	dpkg --print-foreign-architectures | $SUDO tee "$SYSROOT_DIR/.foreign-before" >/dev/null
fi
if [ -n "$missing" ]; then
	say "installing:$missing"
	apt_update
	# shellcheck disable=SC2086
	rcs_step "installing Debian packages" $SUDO env DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -q --no-install-recommends $missing
fi
for at in $sysroots; do
	sysroot_make "${at%%:*}" "${at#*:}"
done
if [ -n "$redocly" ] && ! redocly_install; then
	# the linter is the one thing not from Debian: without the npm registry (offline, or a
	# proxy whose certificate the machine doesn't trust) the rest of the tests still run
	if [ "${RCS_NO_SKIP:-0}" = 1 ]; then
		echo "$0: Redocly's CLI is needed (RCS_NO_SKIP=1): fix the npm registry access above" >&2
		exit 1
	fi
	say "Redocly's CLI not installed (npm registry unreachable, see above): test_openapi_lint" \
		"will be skipped, saying so; run tools/deps.sh test again once npm can reach it"
fi
