#!/bin/sh
# ratios.sh — the Go benchmarks of bench/, run as paired, alternated samples,
# and the engine/peer ratio table.
#
#   sh bench/ratios.sh run [-pairs N] [-small] [-long] [-only ID,ID] LOG
#       builds the test binary once, then for every run below takes N
#       samples (default 5): each sample runs every benchmark of the run
#       once, in order, each in a process of its own with the same fixed
#       -benchtime Nx (equal work), so engine and peer alternate: e, p, e,
#       p, ... The raw output goes to LOG (marked "# run ID SAMPLE INDEX"
#       before each benchmark's output), the table is printed, and its
#       charts (go-targets.svg, go-load.svg, go-sweeps.svg, go-steady.svg)
#       are written beside LOG.
#       -small shrinks the fixtures and the counts a hundredfold: a smoke
#       run of the whole suite, not a measurement. -long runs the long
#       runs (10M records a side, compaction debt included) instead.
#   sh bench/ratios.sh report [-tsv] LOG...
#       the table from logs that run wrote (-tsv: as tab-separated rows,
#       what the charts are drawn from).
#   sh bench/ratios.sh pattern NAME
#       the -test.bench pattern that selects the benchmark NAME alone
#       (AppendSync/writers=64/anchors=16), for running one by hand.
#
# For every row the ratio is computed per sample — the engine's figure of
# sample k over the peer's figure of sample k — and the row shows the
# median of those ratios with their min-max, never a ratio of separately
# taken medians. The result column checks the median against the target
# (PASS/MISS; "info" without one; "no data" when a side is missing).
#
# Exit status of report: 0 when the input had benchmark lines, whatever
# the results (the table is a report, not a gate); 2 when it had none.
# run also exits 1 if a benchmark process failed (its row shows no data).
# Only POSIX sh and awk are needed, and go for run.

set -u

# The runs: ID, records (or ops) a side per sample, then the benchmarks in
# the order a sample runs them. Counts are per benchmark op: -benchtime Nx.
RUNS='
sync      200000  AppendSync/writers=64/anchors=16 PeerPebbleSync/writers=64 PeerPebbleDefaultSync/writers=64 AppendSync/writers=64/anchors=1000 AppendSyncNoAdmission/writers=64/anchors=16
batch     1000    AppendBatchSync/size=1000 PeerPebbleBatchSync/size=1000
nosync    500000  AppendNoSync/writers=1 PeerPebbleNoSync/writers=1
get       1000000 Get PeerPebbleGet
getload   20000   GetUnderLoad PeerPebbleGetUnderLoad
verify    5       Verify/threads=1 PeerHashLinkTree/threads=1 PeerHashOnly/threads=1 Verify/threads=2
merge     3       Merge PeerSortMerge
snapshot  10      SnapshotCreate/durable PeerZstdOnly
rebuild   1       RebuildIndex/from-snapshot RebuildIndex/full
rebuild1e5 1      RebuildIndex/keys=100000/from-snapshot RebuildIndex/keys=100000/full
recovery  1       Recovery
proof     1000    TimeToProof
sweep-w1  5000    SweepSync/writers=1/value=100 SweepPeerPebbleSync/writers=1/value=100
sweep-w4  20000   SweepSync/writers=4/value=100 SweepPeerPebbleSync/writers=4/value=100
sweep-w256 200000 SweepSync/writers=256/value=100 SweepPeerPebbleSync/writers=256/value=100
sweep-v1k 100000  SweepSync/writers=64/value=1024 SweepPeerPebbleSync/writers=64/value=1024
sweep-v16k 20000  SweepSync/writers=64/value=16384 SweepPeerPebbleSync/writers=64/value=16384
sweep-v1m 500     SweepSync/writers=64/value=1048576 SweepPeerPebbleSync/writers=64/value=1048576
'

# The long runs (-long): the headline appends at 10M records a side, the
# clock stopping only when each side has worked off its compaction debt.
LONGRUNS='
steady-sync  10000000 AppendSync/writers=64/anchors=16 PeerPebbleSync/writers=64
steady-batch 10000    AppendBatchSync/size=1000 PeerPebbleBatchSync/size=1000
'

# The table's rows: label | run | engine benchmark | its metric | peer
# benchmark | its metric | target (ratio >= it; "<" before it: ratio <= it;
# "-": none) | the chart it is drawn in. A row's ratio is engine figure /
# peer figure, per sample.
ROWS='
sync append, 64 writers x 16 anchors|sync|AppendSync/writers=64/anchors=16|records/s|PeerPebbleSync/writers=64|records/s|1.0|targets
 (the same vs Pebble with its defaults)|sync|AppendSync/writers=64/anchors=16|records/s|PeerPebbleDefaultSync/writers=64|records/s|-|targets
1,000 anchors vs 16|sync|AppendSync/writers=64/anchors=1000|records/s|AppendSync/writers=64/anchors=16|records/s|0.8|targets
admission on vs off|sync|AppendSync/writers=64/anchors=16|records/s|AppendSyncNoAdmission/writers=64/anchors=16|records/s|0.95|targets
batch sync, 1,000 records|batch|AppendBatchSync/size=1000|records/s|PeerPebbleBatchSync/size=1000|records/s|0.8|targets
no-sync append, 1 writer|nosync|AppendNoSync/writers=1|records/s|PeerPebbleNoSync/writers=1|records/s|0.6|targets
get, 1M keys, settled and compacted|get|Get|records/s|PeerPebbleGet|records/s|0.5|targets
get under 64 writers: p50 latency|getload|GetUnderLoad|get-p50-us|PeerPebbleGetUnderLoad|get-p50-us|-|load
get under 64 writers: p99 latency|getload|GetUnderLoad|get-p99-us|PeerPebbleGetUnderLoad|get-p99-us|-|load
get under 64 writers: p99.9 latency|getload|GetUnderLoad|get-p999-us|PeerPebbleGetUnderLoad|get-p999-us|-|load
 (their write rate meanwhile)|getload|GetUnderLoad|writes/s|PeerPebbleGetUnderLoad|writes/s|-|load
verify, 1 thread, vs hash+link+tree|verify|Verify/threads=1|records/s|PeerHashLinkTree/threads=1|records/s|0.7|targets
 (the same vs hash only)|verify|Verify/threads=1|records/s|PeerHashOnly/threads=1|records/s|-|targets
verify, 2 threads vs 1|verify|Verify/threads=2|records/s|Verify/threads=1|records/s|1.6|targets
merge vs sort-merge of the files|merge|Merge|records/s|PeerSortMerge|records/s|1.0|targets
snapshot vs zstd alone|snapshot|SnapshotCreate/durable|records/s|PeerZstdOnly|records/s|0.6|targets
rebuild: snapshot+tail vs full replay|rebuild|RebuildIndex/from-snapshot|records/s|RebuildIndex/full|records/s|3.0|targets
 (the same, 100,000 keys)|rebuild1e5|RebuildIndex/keys=100000/from-snapshot|records/s|RebuildIndex/keys=100000/full|records/s|-|targets
recovery: open after SIGKILL, 10M vs 1M|recovery|Recovery|large-open-ms|Recovery|small-open-ms|<1.2|targets
time to proof: p99 vs fdatasync p99|proof|TimeToProof|proof-p99-us|TimeToProof|fsync-p99-us|<4.0|targets
sweep: sync, 1 writer|sweep-w1|SweepSync/writers=1/value=100|records/s|SweepPeerPebbleSync/writers=1/value=100|records/s|-|sweeps
sweep: sync, 4 writers|sweep-w4|SweepSync/writers=4/value=100|records/s|SweepPeerPebbleSync/writers=4/value=100|records/s|-|sweeps
sweep: sync, 64 writers (the first row)|sync|AppendSync/writers=64/anchors=16|records/s|PeerPebbleSync/writers=64|records/s|-|sweeps
sweep: sync, 256 writers|sweep-w256|SweepSync/writers=256/value=100|records/s|SweepPeerPebbleSync/writers=256/value=100|records/s|-|sweeps
sweep: sync, 64 writers, 1 KiB values|sweep-v1k|SweepSync/writers=64/value=1024|records/s|SweepPeerPebbleSync/writers=64/value=1024|records/s|-|sweeps
sweep: sync, 64 writers, 16 KiB values|sweep-v16k|SweepSync/writers=64/value=16384|records/s|SweepPeerPebbleSync/writers=64/value=16384|records/s|-|sweeps
sweep: sync, 64 writers, 1 MiB values|sweep-v1m|SweepSync/writers=64/value=1048576|records/s|SweepPeerPebbleSync/writers=64/value=1048576|records/s|-|sweeps
steady state: sync, 10M records, to quiescence|steady-sync|AppendSync/writers=64/anchors=16|records/s|PeerPebbleSync/writers=64|records/s|-|steady
steady state: batches, 10M records, to quiescence|steady-batch|AppendBatchSync/size=1000|records/s|PeerPebbleBatchSync/size=1000|records/s|-|steady
'

report() {
	tsv=0
	if [ "${1:-}" = -tsv ]; then tsv=1; shift; fi
	RATIO_ROWS=$ROWS awk -v tsv=$tsv '
# "# run ID SAMPLE INDEX" starts the output of one benchmark process.
/^# run / { id = $3; k = $4 + 0; if (k > maxk[id]) maxk[id] = k; next }
/^# (machine|commit|date|mode|load):/ { sub(/^# /, ""); hdr[++nh] = $0; next }
/^# fail / { failed[$3] = 1; next }
/^Benchmark/ {
	name = $1
	sub(/^Benchmark/, "", name)
	sub(/-[0-9]+$/, "", name)   # the GOMAXPROCS suffix
	for (i = 3; i < NF; i++)
		if ($i ~ /^-?[0-9.]+(e[-+]?[0-9]+)?$/ && $(i + 1) !~ /^-?[0-9.]/)
			val[id, k, name, $(i + 1)] = $i + 0
	lines++
}

function sortn(a, n,    i, j, x) {
	for (i = 2; i <= n; i++) {
		x = a[i]
		for (j = i - 1; j >= 1 && a[j] > x; j--) a[j + 1] = a[j]
		a[j + 1] = x
	}
}
function median(a, n) {
	sortn(a, n)
	if (n % 2) return a[(n + 1) / 2]
	return (a[n / 2] + a[n / 2 + 1]) / 2
}
function fmt(x) {
	if (x >= 100) return sprintf("%.0f", x)
	if (x >= 1) return sprintf("%.2f", x)
	return sprintf("%.3g", x)
}

END {
	if (lines == 0) { print "ratios.sh: no benchmark lines in the input" > "/dev/stderr"; exit 2 }
	if (tsv) {
		for (i = 1; i <= nh; i++) print "#\t" hdr[i]
	} else {
		for (i = 1; i <= nh; i++) print hdr[i]
		print "each row: the ratio engine/peer per sample (engine and peer run alternately, the same records"
		print "each, each to rest); median [min-max] over the samples; n = samples with both sides"
		print ""
		printf "%-50s %-14s %12s %12s %-22s %3s %8s  %s\n", "row", "unit", "engine", "peer", "ratio [min-max]", "n", "target", "result"
	}
	nr = split(ENVIRON["RATIO_ROWS"], R, "\n")
	for (r = 1; r <= nr; r++) {
		if (R[r] == "") continue
		split(R[r], f, "|")
		label = f[1]; id = f[2]; en = f[3]; em = f[4]; pn = f[5]; pm = f[6]; tgt = f[7]; chart = f[8]
		if (!(id in maxk)) continue            # a run not in these logs (the long ones, -only)
		n = 0; ne = 0; np = 0
		delete rs; delete es; delete ps
		for (k = 1; k <= maxk[id]; k++) {
			he = ((id, k, en, em) in val); hp = ((id, k, pn, pm) in val)
			if (he) es[++ne] = val[id, k, en, em]
			if (hp) ps[++np] = val[id, k, pn, pm]
			if (he && hp && val[id, k, pn, pm] > 0) rs[++n] = val[id, k, en, em] / val[id, k, pn, pm]
		}
		tshow = tgt; op = ">="; limit = tgt + 0
		if (tgt ~ /^</) { op = "<="; limit = substr(tgt, 2) + 0; tshow = "<= " substr(tgt, 2) }
		else if (tgt != "-") tshow = ">= " tgt
		if (n == 0) {
			if (tsv) printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t-\t-\t-\t0\t%s\tno data\n", chart, label, en, pn, em, (ne ? median(es, ne) : "-"), (np ? median(ps, np) : "-"), tgt
			if (tgt != "-") nodata++
			if (tsv) continue
			printf "%-50s %-14s %12s %12s %-22s %3d %8s  %s\n", label, em, (ne ? fmt(median(es, ne)) : "-"), (np ? fmt(median(ps, np)) : "-"), "-", 0, tshow, "no data"
			continue
		}
		lo = rs[1]; hi = rs[1]
		for (i = 2; i <= n; i++) { if (rs[i] < lo) lo = rs[i]; if (rs[i] > hi) hi = rs[i] }
		m = median(rs, n)
		res = "info"
		if (tgt != "-") {
			if ((op == ">=" && m >= limit) || (op == "<=" && m <= limit)) { res = "PASS"; pass++ } else { res = "MISS"; miss++ }
		}
		if (n < 5) res = res " (only " n " samples)"
		if (tsv) {
			printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", chart, label, en, pn, em, median(es, ne), median(ps, np), m, lo, hi, n, tgt, res
			continue
		}
		printf "%-50s %-14s %12s %12s %-22s %3d %8s  %s\n", label, em, fmt(median(es, ne)), fmt(median(ps, np)), sprintf("%.2f [%.2f-%.2f]", m, lo, hi), n, tshow, res
	}
	if (!tsv) printf "\ntargets: %d PASS, %d MISS, %d without data\n", pass, miss, nodata
}
' "$@"
}

# benchre turns AppendSync/writers=64/anchors=16 into the -test.bench
# pattern that selects it alone.
benchre() {
	echo "$1" | awk -F/ '{ s = "^Benchmark" $1 "$"; for (i = 2; i <= NF; i++) s = s "/^" $i "$"; print s }'
}

run() {
	pairs=5 small='' long='' only=''
	while [ $# -gt 1 ]; do
		case $1 in
		-pairs) pairs=$2; shift 2 ;;
		-small) small=1; shift ;;
		-long) long=1; shift ;;
		-only) only=",$2,"; shift 2 ;;
		*) echo "ratios.sh run: unknown flag $1" >&2; exit 2 ;;
		esac
	done
	[ $# -eq 1 ] || { echo "usage: ratios.sh run [-pairs N] [-small] [-long] [-only ID,ID] LOG" >&2; exit 2; }
	log=$1
	here=$(cd "$(dirname "$0")" && pwd)
	work=$(mktemp -d "${TMPDIR:-/tmp}/anchordb-ratios-XXXXXX") || exit 1
	trap 'rm -rf "$work"' EXIT
	trap 'exit 130' INT TERM
	bin=$work/bench.test
	(cd "$here" && ${GO:-go} test -c -o "$bin" .) || exit 1
	runs=$RUNS
	[ -n "$long" ] && runs=$LONGRUNS
	flags=''
	[ -n "$small" ] && flags=-anchordb.small
	start=$(date -u '+%Y-%m-%d %H:%M')
	{
		echo "# machine: $("$bin" -anchordb.machine)"
		echo "# commit: $(cd "$here" && git rev-parse --short HEAD 2>/dev/null || echo unknown)$(cd "$here" && git diff --quiet HEAD -- 2>/dev/null || echo ' (with uncommitted changes)')"
		echo "# mode: $pairs samples${small:+, -small fixtures (a smoke run, not a measurement)}${long:+, long runs}"
		echo "# load: before, $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1, 5, 15 min)"
	} > "$log"
	status=0
	export ANCHORDB_BENCH_FIXTURES="$work/fixtures"
	mkdir -p "$ANCHORDB_BENCH_FIXTURES"
	echo "$runs" | while read -r id n benches; do
		[ -z "$id" ] && continue
		case $only in ''|*",$id,"*) ;; *) continue ;; esac
		[ -n "$small" ] && n=$(( n / 100 > 0 ? n / 100 : 1 ))
		k=1
		while [ "$k" -le "$pairs" ]; do
			j=1
			for b in $benches; do
				echo "# run $id $k $j" >> "$log"
				echo "ratios.sh: $id sample $k/$pairs: $b (${n}x)" >&2
				if ! (cd "$here" && "$bin" -test.run '^$' -test.bench "$(benchre "$b")" \
					-test.benchtime "${n}x" -test.timeout 120m $flags) >> "$log" 2>&1; then
					echo "# fail $id $k $j $b" >> "$log"
					echo "ratios.sh: $b failed (see $log)" >&2
					touch "$work/failed"
				fi
				j=$((j + 1))
			done
			k=$((k + 1))
		done
	done
	echo "# date: $start - $(date -u '+%H:%M') UTC" >> "$log"
	echo "# load: after, $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo unknown) (1, 5, 15 min)" >> "$log"
	[ -e "$work/failed" ] && status=1
	report -tsv "$log" > "$work/rows.tsv" &&
		"$bin" -anchordb.ratios "$work/rows.tsv" -anchordb.charts "$(dirname "$log")" ||
		{ echo "ratios.sh: the charts were not drawn" >&2; status=1; }
	report "$log"
	return $status
}

case ${1:-} in
run) shift; run "$@" ;;
report) shift; report "$@" ;;
pattern) shift; benchre "$1" ;;
*) echo "usage: ratios.sh run [-pairs N] [-small] [-long] [-only ID,ID] LOG | ratios.sh report LOG..." >&2; exit 2 ;;
esac
