#!/bin/sh
# Fails when clang-format (the repository's .clang-format; Debian's clang-format, installed by
# `tools/deps.sh test`) would change a tracked C source or header: each such file is named with
# what it would change. Run `clang-format -i FILE` to mend it.
set -eu
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || {
	echo "check-format: clang-format is missing (tools/deps.sh test installs it)" >&2
	exit 1
}
# every tracked C file: none is generated or vendored (the dashboard's embedded files are
# generated in the build directory, which is not tracked)
if ! git ls-files -z '*.c' '*.h' | xargs -0 -r clang-format --dry-run --Werror; then
	echo "check-format: clang-format would change the files named above (clang-format -i)" >&2
	exit 1
fi
