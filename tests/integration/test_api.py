"""The Python API (orchestrator.api) as a Ray user's driver calls it: in a process whose Ray is
already initialised (collbench must neither call ray.init again nor shut it down), on the nodes
the caller names and on a placement group the caller holds. The driver is a subprocess, as a
notebook would be: its Ray session is its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

DRIVER = textwrap.dedent("""
    import json, sys
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from orchestrator import api

    ray.init(address=sys.argv[1], logging_level="ERROR")
    gcs = ray.get_runtime_context().gcs_address
    out = sys.argv[2]
    said = {}
    try:
        api.run(collectives=["nope"])
    except api.UsageError as e:
        said["bad"] = str(e)
    node = ray.nodes()[0]["NodeManagerAddress"]
    first = api.run(collectives=["all_reduce"], min_bytes="64K", max_bytes="256K", iters=3, ranks_per_node=2,
                    output=out, nodes=[node])
    second = api.run(collectives=["all_reduce"], min_bytes="64K", max_bytes="256K", iters=3, ranks_per_node=2,
                     output=out)
    rows = first.rows()
    rep = api.report(first)
    cmp = api.compare(out, baseline_runs=[first.run_id], new_run=second.run_id)
    pg = placement_group([{"CPU": 1}, {"CPU": 1}], strategy="STRICT_PACK")
    pre = api.preflight(pg, output=out, min_bytes="64K", max_bytes="256K")
    remove_placement_group(pg)
    q = api.qualify(nodes=[node], output=out, min_bytes="64K", max_bytes="256K", ranks_per_node=2)
    latest, again = api.report(out), api.compare(out)  # no run named: the sweeps, not the qualify runs
    said.update(after=[latest.run["run_id"], again.baseline_runs, again.new_run, again.picked], second=second.run_id,
                still_initialised=ray.is_initialized(), same_session=ray.get_runtime_context().gcs_address == gcs,
        states=[first.state, second.state], codes=[first.exit_code, second.exit_code],
        rows=len(rows), sizes=sorted(set(rows.msg_bytes)), ok=bool((rows.status == "ok").all()),
        wrong=int(rows.n_wrong.sum()), run_ids=sorted(set(rows.run_id)), first=first.run_id,
        manifest_state=first.manifest.get("state"), busbw_columns=list(rep.frame("busbw").columns),
        flags=len(rep.flags), matched=len(cmp.matched), flagged=len(cmp.flagged),
        preflight=[pre.ok, pre.exclude, [v.verdict.value for v in pre.qualification.nodes],
                   pre.qualification.state],
        qualify=[q.state, [v.node for v in q.nodes], q.exit_code])
    print(json.dumps(said))
""")


def test_the_api_in_a_callers_ray_session(ray_head, tmp_path):
    proc = subprocess.run([sys.executable, "-c", DRIVER, ray_head.address, str(tmp_path / "results")],
                          capture_output=True, text=True, env=ray_head.env(), timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    said = json.loads(proc.stdout.strip().splitlines()[-1])
    assert said["bad"] == "--collectives: unknown value 'nope' (choose from " + said["bad"].split("(choose from ")[1]
    # the caller's session is used as it is, and left running
    assert said["still_initialised"] and said["same_session"]
    assert said["states"] == ["finished", "finished"] and said["codes"] == [0, 0]
    # one intra group of 2 ranks, all_reduce (in place) at 64K and 256K: the run's own rows
    assert said["rows"] == 2 and said["sizes"] == [64 << 10, 256 << 10] and said["ok"] and said["wrong"] == 0
    assert said["run_ids"] == [said["first"]] and said["manifest_state"] == "finished"
    assert said["busbw_columns"][:3] == ["collective", "msg_bytes", "size"]
    assert said["matched"] == 2  # the same link at both sizes
    # the placement group's two CPU bundles are the ranks: one intra probe, passed
    ok, exclude, verdicts, state = said["preflight"]
    assert state == "finished" and verdicts == ["pass"] and ok is True and exclude == []
    assert said["qualify"][0] == "finished" and said["qualify"][2] == 0
    # after the preflight and the qualify into the same folder, report and compare without a run id
    # take the two sweeps and say which (issue 45)
    report_run, baseline_runs, new_run, picked = said["after"]
    assert (report_run, baseline_runs, new_run) == (said["second"], [said["first"]], said["second"])
    assert len(picked) == 1 and picked[0].startswith(f"new run {said['second']}: the latest sweep in ") and \
        "passed over 2 qualify run(s) newer than it" in picked[0], picked
