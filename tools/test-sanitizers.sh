#!/bin/sh
# Builds everything with ASan+UBSan in build-san/ (or $RCS_SAN_BUILD_DIR) and runs the whole
# test suite through ctest, with every sanitizer finding fatal: AddressSanitizer errors,
# UndefinedBehaviorSanitizer runtime errors, and leaks (LeakSanitizer at exit, also in the
# daemons the integration tests start and stop with SIGTERM: a leak makes the daemon exit
# non-zero, which fails the test).
#
# The whole suite: the unit tests (the jail's escape battery included), every integration
# test (the agent's, through real sanitized agents whose jail children come from the
# single-threaded launcher: GCC 12's ASan runtime is not fork-safe, llvm-project#75290, and
# nothing forks from a thread any more), and the qemu test, whose cross-built agents are
# built without sanitizers (qemu-user can't run ASan's shadow memory) but talk to the
# sanitized coordinator.
# LeakSanitizer suppressions (third-party libraries only): tests/sanitizers/lsan.supp.
# Run tools/test.sh first: it installs the packages the tests need.
# Two tests at a time, as tools/test.sh runs them (the tests mostly wait on their daemons:
# sanitized, each takes about as long as without), but the tests with fleets of their own
# (the fault scenarios, the bulk fleet, the concurrency tests) after the others, one at a
# time: sanitized daemons are two to three times slower, and such a fleet would starve a
# timing-sensitive test running beside it. About 30 minutes on 2 cores, the build included.
set -eu
cd "$(dirname "$0")/.."
src=$(pwd)
build=${RCS_SAN_BUILD_DIR:-build-san}
. tools/lib.sh
rcs_step "configuring the sanitizer build (CMake)" cmake -S . -B "$build" \
	-DCMAKE_BUILD_TYPE=Debug -DWITH_SANITIZERS=ON -DWITH_WERROR=ON -DWITH_TESTS=ON
cmake --build "$build" -j "$(nproc)"
cd "$build"
# verify_asan_link_order=0: the fault tests run the coordinator under libfaketime
# (LD_PRELOAD), which then comes before libasan; it intercepts only clock calls.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1:verify_asan_link_order=0 \
UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
LSAN_OPTIONS="suppressions=$src/tests/sanitizers/lsan.supp:print_suppressions=0"
export ASAN_OPTIONS UBSAN_OPTIONS LSAN_OPTIONS
alone='test_(faults|faults_scale_out|bulk_fleet|mqttc_concurrency|store_concurrency|scale_out)($|\.)'
status=0
ctest --output-on-failure --timeout 900 -j 2 -E "$alone" || status=1
ctest --output-on-failure --timeout 900 -R "$alone" || status=1
exit $status
