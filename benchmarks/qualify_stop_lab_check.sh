#!/bin/bash
# qualify stopped by SIGUSR1 on a lab no test builds (issue 44; docs/PERFORMANCE.md 8.8): no declared rate,
# NODES one-rank nodes at 400mbit, SLOW node links (I=RATE[,I=RATE]; none), the signal once round K is said;
# the lab (NAME, SUBNET) is removed after. Usage: bash benchmarks/qualify_stop_lab_check.sh NAME NODES SLOW K SUBNET
set -u
cd "$(dirname "$0")/.." && . .venv/bin/activate
name=$1 nodes=$2 slow=$3 k=$4 subnet=$5
out=/tmp/stopcheck-$name; rm -rf $out; mkdir -p $out
extra=(); if [ "$slow" != none ]; then for s in ${slow//,/ }; do extra+=(--node-link "$s"); done; fi
python -m orchestrator lab up --name $name --nodes $nodes --cpus-per-node 1 --link 400mbit "${extra[@]}" --undeclared --subnet $subnet > $out/up.log 2>&1 || { cat $out/up.log; exit 1; }
python -m orchestrator lab exec --name $name -- python -m orchestrator qualify --collective all_reduce -b 4M -e 4M --ranks-per-node 1 --run-id stop-$name --output $out/results > $out/q.log 2>&1 &
pid=$!
for i in $(seq 1 300); do grep -q "collbench: round $k (" $out/q.log && break; sleep 0.5; done
qpid=$(python -c 'import json,sys; print(json.load(open(sys.argv[1]))["pid"])' $out/results/_runs/stop-$name.lock)
kill -USR1 $qpid
wait $pid; echo "exit $?"
grep -E "^collbench: (round|stopped|interrupted)|named so far; not|^\|" $out/q.log | cut -c1-200
python -m orchestrator lab down --name $name > /dev/null 2>&1; echo down $?
