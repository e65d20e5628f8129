#!/bin/sh
# fuzz/run.sh FUZZTIME PKG... — fuzz every target in each package for
# FUZZTIME, one after another.
#
# A duration -fuzztime races Go's fuzz coordinator against its own deadline
# (go.dev/issue/75804, fixed in Go 1.27, present in 1.26.x): on a loaded
# machine a worker still mid-input when the clock runs out is reported as
# "--- FAIL ... context deadline exceeded", with no input written. That is
# not a finding, so such a run is retried once, bounded by a count of
# inputs instead of a duration (-fuzztime Nx, N the inputs the first run
# reached): a count sets no deadline, so the retry cannot meet the race. A
# run that writes a failing input, or fails any other way, fails.
#
# FUZZMINIMIZETIME, if set and not empty, is passed as -fuzzminimizetime.
set -u
GO=${GO:-go}
minimize=
if [ -n "${FUZZMINIMIZETIME:-}" ]; then
	minimize="-fuzzminimizetime $FUZZMINIMIZETIME"
fi
fuzztime=$1
shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
# dash runs no EXIT trap when a signal kills it: turn the signal into an exit.
trap 'exit 130' INT TERM

# deadline_only: the log shows the coordinator's deadline race and nothing
# that a real finding prints.
deadline_only() {
	grep -q 'context deadline exceeded' "$out" &&
		! grep -q -e 'Failing input written' -e 'panic:' -e '_test.go:[0-9]' "$out"
}

for pkg in "$@"; do
	targets=$($GO test -list '^Fuzz' "$pkg" | grep '^Fuzz') || { echo "fuzz: cannot list $pkg" >&2; exit 1; }
	for t in $targets; do
		budget=$fuzztime
		for try in 1 2; do
			echo "== $pkg $t"
			if $GO test "$pkg" -run '^$' -fuzz "^$t\$" -fuzztime "$budget" $minimize -parallel 1 >"$out" 2>&1; then
				cat "$out"
				break
			fi
			cat "$out"
			if [ "$try" = 1 ] && deadline_only; then
				execs=$(sed -n 's/.* execs: \([0-9][0-9]*\) .*/\1/p' "$out" | tail -n 1)
				[ "${execs:-0}" -ge 1000 ] || execs=1000
				budget=${execs}x
				echo "fuzz: $t hit the -fuzztime deadline race (go.dev/issue/75804), no input written; running it again for $execs inputs (-fuzztime $budget)"
				continue
			fi
			echo "fuzz: $pkg $t failed" >&2
			exit 1
		done
	done
done
