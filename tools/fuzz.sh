#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz in build-fuzz/ (clang; the whole tree built
# with coverage, ASan and UBSan) and runs them, one after another, one process each.
#   tools/fuzz.sh short [SECONDS]             every target over its seed corpus, then fuzzing,
#                                             SECONDS (default 60) shared by all targets (CI)
#   tools/fuzz.sh long [SECONDS] [TARGET...]  each target (default: all) for SECONDS
#                                             (default 600)
#   tools/fuzz.sh build                       only configure and build
# Any crash, leak, sanitizer report, timeout or out-of-memory fails it (exit 1). Crashing
# inputs go to build-fuzz/artifacts/<target>-crash-..., logs to build-fuzz/logs/<target>.log,
# the corpora the fuzzers grow to build-fuzz/corpus/<name>/ (seeds: tests/fuzz/corpus/<name>/).
# Re-run one input: build-fuzz/fuzz/<target> <file> (RCS_FUZZ_VERBOSE=1 shows the API answers).
set -eu
cd "$(dirname "$0")/.."
B=build-fuzz

mode=${1:-short}
case "$mode" in
short) secs=${2:-60} ;;
long) secs=${2:-600} ;;
build) secs=0 ;;
*) echo "usage: $0 short [SECONDS] | long [SECONDS] [TARGET...] | build" >&2; exit 2 ;;
esac
case "$secs" in
'' | *[!0-9]*) echo "$0: SECONDS must be a number, not '$secs'" >&2; exit 2 ;;
esac
if [ $# -gt 2 ]; then
	shift 2
else
	set --
fi

# ---- what the build needs: the project's packages, and clang with libFuzzer ----
. tools/lib.sh
tools/deps.sh fuzz
f=$(clang -print-file-name="libclang_rt.fuzzer-$(uname -m).a" 2>/dev/null || true)
if [ ! -f "$f" ]; then
	echo "$0: clang's libFuzzer runtime (libclang_rt.fuzzer) is missing after tools/deps.sh fuzz" >&2
	exit 1
fi

# ---- build (only the fuzz targets and the libraries they link; no daemons) ----
rcs_step "configuring the fuzz build (CMake)" cmake -S . -B "$B" \
	-DCMAKE_C_COMPILER="$(command -v clang)" -DWITH_FUZZ=ON -DWITH_TESTS=OFF \
	-DWITH_AGENT=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$B" --target rcs_fuzz -j "$(nproc)"
[ "$mode" = build ] && exit 0

all=$(cat "$B/fuzz/targets.txt")
if [ $# -gt 0 ]; then
	targets=""
	for t in "$@"; do
		t=fuzz_${t#fuzz_}
		if ! echo "$all" | grep -qx "$t"; then
			echo "$0: no target $t (targets: $(echo "$all" | tr '\n' ' '))" >&2
			exit 2
		fi
		targets="$targets $t"
	done
else
	targets=$all
fi
n=$(echo "$targets" | wc -w)
per=$secs
if [ "$mode" = short ]; then
	per=$((secs / n))
	[ "$per" -lt 2 ] && per=2
fi

dict_of() {
	case "$1" in
	fuzz_canon) echo json ;;
	fuzz_cfg) echo cfg ;;
	fuzz_proto_topic) echo proto_topic ;;
	fuzz_api_* | fuzz_notification) echo api ;;
	*) echo proto ;;
	esac
}

mkdir -p "$B/artifacts" "$B/logs"
summary="$B/logs/summary.txt"
printf '%-22s %8s %10s %8s %7s %7s %8s  %s\n' target seconds execs exec/s cov ft corpus result \
	>"$summary"
failed=0
for t in $targets; do
	name=${t#fuzz_}
	log="$B/logs/$t.log"
	mkdir -p "$B/corpus/$name"
	echo "== $t: ${per}s" >&2
	start=$(date +%s)
	if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 \
		UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"$B/fuzz/$t" -max_total_time="$per" -timeout=25 -rss_limit_mb=2048 -max_len=16384 \
		-print_final_stats=1 -dict="tests/fuzz/dict/$(dict_of "$t").dict" \
		-artifact_prefix="$B/artifacts/$t-" "$B/corpus/$name" "tests/fuzz/corpus/$name" \
		>"$log" 2>&1; then
		result=ok
	else
		result="FAILED (exit $?, see $log)"
		failed=1
		grep -E "^(==[0-9]+==ERROR|SUMMARY|.*check failed|.*runtime error|artifact_prefix|Test unit written)" \
			"$log" | head -8 >&2 || true
	fi
	elapsed=$(($(date +%s) - start))
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1 || true)
	cov=$(echo "$last" | sed -n 's/.*cov: \([0-9]*\).*/\1/p')
	ft=$(echo "$last" | sed -n 's/.*ft: \([0-9]*\).*/\1/p')
	corp=$(echo "$last" | sed -n 's/.*corp: \([0-9]*\)\/.*/\1/p')
	printf '%-22s %8s %10s %8s %7s %7s %8s  %s\n' "$t" "$elapsed" "${execs:--}" "${rate:--}" \
		"${cov:--}" "${ft:--}" "${corp:--}" "$result" | tee -a "$summary" >&2
done
echo "summary: $summary" >&2
exit $failed
