#!/bin/sh
# Builds the Debian packages into dist/ (docs/deploy.md, "Packages"):
#   rcs-coordinator  amd64, arm64
#   rcs-agent        amd64, arm64, armhf
# each from `cmake --install` of a build for that architecture (CPack's DEB generator), the
# foreign ones cross-built against the sysroots of tools/deps.sh; Depends computed by
# dpkg-shlibdeps; then lintian, which must report no error.
#
#   tools/package.sh [ARCH...]      default: amd64 arm64 armhf
#
# RCS_PKG_BUILD (default build-pkg/) holds the build directories, RCS_DIST (default dist/)
# the packages. RCS_SKIP_DEPS=1 skips tools/deps.sh (the install test sets it when it builds
# the packages itself).
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
. tools/lib.sh
[ "${RCS_SKIP_DEPS:-0}" = 1 ] || tools/deps.sh test
arches=${*:-amd64 arm64 armhf}
builds=${RCS_PKG_BUILD:-$top/build-pkg}
dist=${RCS_DIST:-$top/dist}
sysroots=${RCS_SYSROOT_DIR:-/opt/rcs-sysroot}
say() { echo "package.sh: $*" >&2; }

mkdir -p "$dist"
for arch in $arches; do
	b="$builds/$arch"
	set -- -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr -DWITH_TESTS=OFF \
		-DWITH_WERROR="${RCS_WERROR_PKG:-OFF}"
	env_shlibdeps=""
	case "$arch" in
	amd64) ;;
	arm64 | armhf)
		t=aarch64-linux-gnu
		[ "$arch" = armhf ] && t=arm-linux-gnueabihf
		set -- "$@" -DCMAKE_TOOLCHAIN_FILE="$top/toolchains/$t.cmake"
		# the coordinator needs the libraries only the arm64 sysroot holds (tools/deps.sh)
		[ "$arch" = armhf ] && set -- "$@" -DWITH_COORDINATOR=OFF
		# dpkg-shlibdeps: the target's architecture and the sysroot's dpkg database
		env_shlibdeps="DEB_HOST_ARCH=$arch DPKG_ADMINDIR=$sysroots/$t/.dpkg"
		if [ ! -f "$sysroots/$t/.dpkg/status" ]; then
			say "$sysroots/$t has no dpkg database: run tools/deps.sh sysroots"
			exit 1
		fi
		;;
	*)
		say "unknown architecture $arch (amd64, arm64 or armhf)"
		exit 2
		;;
	esac
	say "$arch: building in $b"
	rcs_step "configuring the $arch build" cmake -S "$top" -B "$b" "$@" || exit 1
	rcs_step "building for $arch" cmake --build "$b" -j "$(nproc)" || exit 1
	rm -rf "$b/cpack"
	# shellcheck disable=SC2086
	(cd "$b" && rcs_step "making the $arch packages (cpack)" env $env_shlibdeps cpack -G DEB) ||
		exit 1
	for d in "$b"/cpack/*.deb; do
		cp "$d" "$dist/"
		say "$dist/$(basename "$d"): Depends: $(dpkg-deb -f "$d" Depends)"
	done
done

# lintian: no error (warnings and notes are printed)
debs=""
for arch in $arches; do
	debs="$debs $(ls "$dist"/rcs-*_"$arch".deb)"
done
# shellcheck disable=SC2086
out=$(lintian --tag-display-limit 0 $debs 2>&1 | grep -v 'running with root privileges' || true)
[ -n "$out" ] && echo "$out" >&2
if echo "$out" | grep -q '^E: '; then
	say "lintian reports errors (above)"
	exit 1
fi
say "packages in $dist:"
for d in $debs; do
	echo "$d"
done
