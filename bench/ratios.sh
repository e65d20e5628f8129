#!/bin/sh
# ratios.sh — the engine/peer ratio table from `go test -bench` output.
#
#   go test -run '^$' -bench . -benchtime 2s -count 3 -timeout 60m ./bench/ | tee bench.txt
#   sh bench/ratios.sh bench.txt        # or: ... | sh bench/ratios.sh
#
# For every pair it takes the median records/s of each side over all runs
# (-count N gives N samples), divides engine by reference and checks the
# target of the performance issue, printing PASS or MISS. A pair with a side
# missing from the input prints "no data". Only POSIX awk is needed.
#
# Exit status: 0 when the input was read, whatever the results (the table is
# a report, not a gate); 2 when no benchmark line was found.

exec awk '
/^Benchmark/ {
	name = $1
	sub(/^Benchmark/, "", name)
	sub(/-[0-9]+$/, "", name)   # the GOMAXPROCS suffix
	for (i = 3; i < NF; i++) {
		if ($(i + 1) == "records/s") { nr[name]++; rps[name, nr[name]] = $i + 0 }
		if ($(i + 1) == "ns/op") { nn[name]++; nsop[name, nn[name]] = $i + 0 }
	}
	lines++
}

# median of the k-th samples of name in table t (t: "r" records/s, "n" ns/op)
function median(t, name,    m, i, j, x, a) {
	m = (t == "r") ? nr[name] : nn[name]
	if (m == 0) return -1
	for (i = 1; i <= m; i++) a[i] = (t == "r") ? rps[name, i] : nsop[name, i]
	for (i = 2; i <= m; i++) {
		x = a[i]
		for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
		a[j + 1] = x
	}
	if (m % 2) return a[(m + 1) / 2]
	return (a[m / 2] + a[m / 2 + 1]) / 2
}

function pair(label, eng, ref, target,    e, r, ratio, res, tgt) {
	e = median("r", eng); r = median("r", ref)
	tgt = (target > 0) ? sprintf(">= %.2f", target) : "-"
	if (e < 0 || r <= 0) {
		printf "%-30s %-38s %12s %-30s %12s %7s %8s  %s\n", label, eng, "-", ref, "-", "-", tgt, "no data"
		if (target > 0) nodata++
		return
	}
	ratio = e / r
	if (target <= 0) res = "info"
	else if (ratio >= target) { res = "PASS"; pass++ }
	else { res = "MISS"; miss++ }
	printf "%-30s %-38s %12.0f %-30s %12.0f %7.2f %8s  %s\n", label, eng, e, ref, r, ratio, tgt, res
}

END {
	if (lines == 0) { print "ratios.sh: no benchmark lines in the input" > "/dev/stderr"; exit 2 }
	print "median records/s per benchmark (samples, median ns/op):"
	for (name in nr) names[++k] = name
	for (i = 2; i <= k; i++) { x = names[i]; for (j = i - 1; j >= 1 && names[j] > x; j--) names[j + 1] = names[j]; names[j + 1] = x }
	for (i = 1; i <= k; i++) printf "  %-40s %12.0f records/s  (n=%d, %.0f ns/op)\n", names[i], median("r", names[i]), nr[names[i]], median("n", names[i])
	print ""
	printf "%-30s %-38s %12s %-30s %12s %7s %8s  %s\n", "target", "engine", "records/s", "reference", "records/s", "ratio", "target", "result"
	pair("sync append, 64 writers", "AppendSync/writers=64/anchors=16", "PeerPebbleSync/writers=64", 1.0)
	pair("1,000 anchors vs 16", "AppendSync/writers=64/anchors=1000", "AppendSync/writers=64/anchors=16", 0.8)
	pair("(1,000 anchors vs Pebble)", "AppendSync/writers=64/anchors=1000", "PeerPebbleSync/writers=64", 0)
	pair("batch sync, 1,000 records", "AppendBatchSync/size=1000", "PeerPebbleBatchSync/size=1000", 0.8)
	pair("no-sync append, 1 writer", "AppendNoSync/writers=1", "PeerPebbleNoSync/writers=1", 0.6)
	pair("get, 1M keys", "Get", "PeerPebbleGet", 0.5)
	pair("admission overhead", "AppendSync/writers=64/anchors=16", "AppendSyncNoAdmission/writers=64/anchors=16", 0.95)
	pair("verify, 1 thread", "Verify/threads=1", "PeerHashOnly/threads=1", 0.7)
	pair("verify, 2 threads vs 1", "Verify/threads=2", "Verify/threads=1", 1.6)
	pair("merge vs sort-merge", "Merge", "PeerSortMerge", 1.0)
	pair("snapshot vs zstd alone", "SnapshotCreate/durable", "PeerZstdOnly", 0.6)
	pair("rebuild: snapshot vs replay", "RebuildIndex/from-snapshot", "RebuildIndex/full", 5.0)
	pair("(the same, 100,000 keys)", "RebuildIndex/keys=100000/from-snapshot", "RebuildIndex/keys=100000/full", 0)
	printf "\ntargets: %d PASS, %d MISS, %d without data\n", pass, miss, nodata
}
' "$@"
