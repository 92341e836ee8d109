# shellcheck shell=sh
# Shell functions the scripts in tools/ share (sourced, not run).

# rcs_step WHAT CMD [ARG...]: runs CMD with its output kept in a log. On failure it names the
# step, shows the log's last lines and where the whole log is, and returns CMD's exit status
# (so `rcs_step ... || exit 1`, or set -e, stops the script there).
rcs_step() {
	_rcs_what=$1
	shift
	_rcs_log=$(mktemp "${TMPDIR:-/tmp}/rcs-step.XXXXXX")
	_rcs_rc=0
	"$@" >"$_rcs_log" 2>&1 || _rcs_rc=$?
	if [ "$_rcs_rc" -eq 0 ]; then
		rm -f "$_rcs_log"
		return 0
	fi
	{
		echo "$0: $_rcs_what failed (exit $_rcs_rc): $*"
		echo "---- last lines of its output (all of it: $_rcs_log) ----"
		tail -n "${RCS_STEP_LINES:-40}" "$_rcs_log"
		echo "----"
	} >&2
	return "$_rcs_rc"
}
