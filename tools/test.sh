#!/bin/sh
# Builds everything and runs every test (unit and integration) through ctest.
# Installs missing Debian packages first. Set RCS_WERROR=1 to build with -Werror (CI does).
set -eu
cd "$(dirname "$0")/.."
. tools/lib.sh
tools/deps.sh test
werror=OFF
[ "${RCS_WERROR:-0}" = 1 ] && werror=ON
rcs_step "configuring the build (CMake)" cmake -S . -B build-test \
	-DCMAKE_BUILD_TYPE=RelWithDebInfo -DWITH_TESTS=ON -DWITH_WERROR="$werror"
cmake --build build-test -j "$(nproc)" || {
	echo "$0: building in build-test/ failed (the compiler's messages are above)" >&2
	exit 1
}
cd build-test
ctest --output-on-failure -j 2 --timeout 900
