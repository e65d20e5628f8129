#!/bin/bash
# ab.sh BASE.test HEAD.test [PAIRS]: the append path of two builds of the
# engine, paired and alternated (docs/PERFORMANCE.md, "The restructuring of
# the engine, before and after"). Build each side's binary with
#   go test -c -o /tmp/bench-base.test ./bench   (in a checkout of the base)
#   go test -c -o /tmp/bench-head.test ./bench   (in the head)
# Each pair runs every benchmark below once per side, each in a process of
# its own, alternating which side goes first; the table gives, per
# benchmark, the median of the per-pair ratios head/base with their
# min-max. Running a binary against itself gives the noise. Needs python3.
BASE=$1; HEAD=$2; N=${3:-5}
out=/tmp/pairs.$$; mkdir -p $out
SPECS=("^BenchmarkAppendSync$/^writers=64$/^anchors=16$ 50000x"
       "^BenchmarkAppendSync$/^writers=64$/^anchors=1000$ 50000x"
       "^BenchmarkAppendSyncNoAdmission$ 50000x"
       "^BenchmarkAppendBatchSync$ 100x"
       "^BenchmarkAppendNoSync$ 200000x")
for i in $(seq 1 $N); do
  if [ $((i % 2)) = 1 ]; then order="base head"; else order="head base"; fi
  for spec in "${SPECS[@]}"; do
    set -- $spec
    for bin in $order; do
      if [ $bin = base ]; then b=$BASE; else b=$HEAD; fi
      (cd /tmp && TMPDIR=/var/tmp $b -test.run '^$' -test.bench "$1" -test.benchtime $2 -test.count 1 -test.timeout 30m) | grep records/s | sed "s/^/$i /" >> $out/$bin.txt
    done
  done
done
python3 - $out <<'PY'
import sys,collections,statistics
d=sys.argv[1]
def load(f):
    r={}
    for l in open(f):
        p=l.split(); i=p[0]; name=p[1]
        v=float(p[p.index('records/s')-1]); r[(i,name)]=v
    return r
b=load(d+'/base.txt'); h=load(d+'/head.txt')
rat=collections.defaultdict(list); hv=collections.defaultdict(list); bv=collections.defaultdict(list)
for k in h:
    if k in b: rat[k[1]].append(h[k]/b[k]); hv[k[1]].append(h[k]); bv[k[1]].append(b[k])
for n in sorted(rat):
    r=sorted(rat[n]); print(f"| `{n}` | {statistics.median(r):.3f} | {r[0]:.3f}–{r[-1]:.3f} | {len(r)} | {statistics.median(bv[n]):,.0f} | {statistics.median(hv[n]):,.0f} |")
PY
