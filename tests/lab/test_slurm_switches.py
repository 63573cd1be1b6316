"""Issue 46 inside a real Slurm job: a lab Slurm cluster of six nodes on two leaf bridges of three
(tests/lab/slurmlab.py over `collbench lab up --leaves 2`), whose slurm.conf has the topology/tree
plugin and a topology.conf naming the leaves by Slurm name. The shipped qualify.sbatch, site values
substituted, `--drain` and no `--topology`: collbench reads `scontrol show topology` in the job by
itself; with the path between the leaves at a quarter (leaf 0's uplink at 300 mbit/s under three
400 mbit/s links) it exits 1 naming `slow_uplink leaf0,leaf1`, every node passes, and none is
drained: a switch is no node's to drain."""

from __future__ import annotations

import os

import pytest

from orchestrator.lab import cluster as labmod
from tests.lab.slurmlab import ROOT, VENV, lab_slurm, site_script

pytestmark = pytest.mark.lab
NODES = 6
JOB_TIMEOUT_S = 420


@pytest.fixture(scope="module")
def slurm_leaves(labs):
    with lab_slurm(labs, NODES, leaves=2) as lab:
        yield lab


def test_slurm_knows_the_leaves(slurm_leaves):
    """What Slurm 22.05 says (tests/unit/test_qualify_switches.py reads the same text): the spine lists
    every node below it beside its switches."""
    said = slurm_leaves.scontrol("show", "topology")
    assert said == ("SwitchName=leaf0 Level=0 LinkSpeed=1 Nodes=slm0,slm1,slm2\n"
                    "SwitchName=leaf1 Level=0 LinkSpeed=1 Nodes=slm3,slm4,slm5\n"
                    "SwitchName=spine Level=1 LinkSpeed=1 Nodes=slm[0-5] Switches=leaf[0-1]\n"), said


def test_qualify_in_a_job_reads_slurms_topology_and_names_the_slow_path_drains_nothing(slurm_leaves, tmp_path):
    labmod.shape_uplink(slurm_leaves.state, 0, "300mbit")
    try:
        script = site_script(os.path.join(ROOT, "examples", "slurm", "qualify.sbatch"), str(tmp_path), NODES, VENV,
                             "QUALIFY", "--collective all_reduce -b 4M -e 8M -n 3 --ranks-per-node 1 --drain")
        job = slurm_leaves.sbatch(script, str(tmp_path))
        fields = slurm_leaves.wait_job(job, JOB_TIMEOUT_S)
        out = (tmp_path / f"collbench-qualify-{job}.out").read_text()
        assert (fields["JobState"], fields["ExitCode"]) == ("FAILED", "1:0"), out[-3000:]
        assert "collbench: switches from scontrol show topology: leaf0 3 node(s), leaf1 3 node(s)" in out, out[-3000:]
        assert "collbench: slow_uplink leaf0,leaf1: the path between leaf0 and leaf1: " in out, out[-3000:]
        assert "collbench: 6 of 6 node(s) pass" in out and "drained" not in out, out[-3000:]
        assert set(slurm_leaves.states().values()) == {"idle"}, slurm_leaves.states()
    finally:
        labmod.shape_uplink(slurm_leaves.state, 0, slurm_leaves.state.uplink_of(0))
