#!/bin/sh
# Builds everything with ASan+UBSan in build-san/ and runs the test suite through ctest,
# with every sanitizer finding fatal: AddressSanitizer errors, UndefinedBehaviorSanitizer
# runtime errors, and leaks (LeakSanitizer at exit, also in the daemons the integration
# tests start and stop with SIGTERM: a leak makes the daemon exit non-zero, which fails
# the test). The qemu test is left out (qemu-user and ASan don't mix; tools/test.sh runs it).
# Run tools/test.sh first: it installs the packages the tests need.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DWITH_SANITIZERS=ON -DWITH_WERROR=ON \
	>/dev/null
cmake --build build-san -j "$(nproc)"
cd build-san
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0" \
	ctest --output-on-failure -j 2 --timeout 900 -E 'test_agent_qemu'
