#!/bin/bash
# The switch verdicts (report --topology, qualify --topology) on lab shapes no test builds (issue 46;
# docs/PERFORMANCE.md 8.5, 8.6): per shape a lab of N nodes on K leaves, healthy twice, then one uplink
# at half, twice; each time a pairwise run read by the report, a qualification, and a watch cycle.
# Needs root; builds and removes its own labs.  bash benchmarks/uplink_lab_check.sh [lc3 lc2 lc4]
set -u
. /work/main/.venv/bin/activate
run_shape() {  # name nodes leaves link slow_leaf slow_rate
  name=$1; n=$2; k=$3; link=$4; leaf=$5; rate=$6
  collbench lab up --name $name --nodes $n --leaves $k --link $link --undeclared --cpus-per-node 1 --subnet 10.216.$((RANDOM%200+20)).0/24 >/dev/null 2>&1 || { echo "up failed $name"; return; }
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH=/tmp/collbench-lab-$name/auth_token
  A=$(python -c "import json;s=json.load(open('/tmp/collbench-lab-$name/state.json'));print(s['subnet'].replace('.0/24','.1')+':%d'%s['port'])")
  T=/tmp/collbench-lab-$name/topology.conf
  for phase in healthy healthy slow slow; do
    if [ $phase = slow ]; then python -c "from orchestrator.lab import cluster; st=cluster.load('$name'); cluster.shape_uplink(st, $leaf, '$rate')"; fi
    out=/tmp/lc-$name-$RANDOM
    collbench run --address $A --ranks-per-node 1 --patterns pairwise --collectives all_reduce -b 4M -e 8M -n 3 --output $out >/dev/null 2>&1
    collbench report $out --topology $T --format json 2>/dev/null | python -c "import json,sys; d=json.load(sys.stdin); b=[r['inter'] for r in d['tables']['busbw']]; print('$name $phase report', [(f['kind'], f.get('switches') or f['nodes']) for f in d['flags']], 'busbw median', b)"
    collbench watch --address $A --ranks-per-node 1 --patterns pairwise --collectives all_reduce -b 4M -e 8M -n 3 -w 1 --topology $T --cycles 1 --every 1s --format jsonl --output $out-w 2>/dev/null | python -c "import json,sys; c=[json.loads(l) for l in sys.stdin if l.startswith('{')][0]; print('$name $phase watch', [(a['node'], a['kind']) for a in c['alerts']], 'doubted', c['doubted'])"
    collbench qualify --address $A --ranks-per-node 1 -b 4M -e 8M -n 3 --topology $T --format json --output $out-q 2>/dev/null | python -c "import json,sys; d=json.load(sys.stdin); print('$name $phase qualify', [(s['verdict'], s['switches'], round(s['factor'], 2)) for s in d['switches']], 'named', [(v['node'], v['verdict']) for v in d['nodes'] if v['verdict'] != 'pass'], 'rounds', d['rounds'])"
  done
  collbench lab down --name $name >/dev/null
}
for shape in ${@:-lc3 lc2 lc4}; do
  case $shape in
    lc3) run_shape lc3 6 3 400mbit 1 200mbit ;;
    lc2) run_shape lc2 4 2 400mbit 0 200mbit ;;
    lc4) run_shape lc4 8 2 400mbit 1 800mbit ;;
  esac
done
