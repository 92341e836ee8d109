#!/bin/sh
# Builds everything and runs every test (unit and integration) through ctest.
# Installs missing Debian packages first. Set RCS_WERROR=1 to build with -Werror (CI does).
set -eu
cd "$(dirname "$0")/.."
tools/deps.sh test
werror=OFF
[ "${RCS_WERROR:-0}" = 1 ] && werror=ON
cmake -S . -B build-test -DCMAKE_BUILD_TYPE=RelWithDebInfo -DWITH_WERROR="$werror" >/dev/null
cmake --build build-test -j "$(nproc)"
cd build-test
ctest --output-on-failure -j 2 --timeout 900
