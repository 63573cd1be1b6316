"""The NCCL Inspector's JSON into rows (issue 34): workloads.inspector on the Inspector's README
example and on records rebuilt from its writer (tests/fixtures/inspector/SOURCE.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.execution import transport
from orchestrator.results.schema import ROW_SCHEMA, rows_table
from workloads import inspector
from workloads.messages import InspectorOps, Transport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inspector"
TWO_RANKS = FIXTURES / "two_ranks"
AR_1M = (20.97152, 20.164923, 10.48576, 19.065018, 17.476267)  # the kernel-timed AllReduce records at 1 MiB


def test_the_readme_examples_are_read_with_their_documented_values():
    text = (FIXTURES / "readme_example.json").read_text()
    parsed, used = inspector.parse(text)
    assert used == len(text) and parsed.bad == 0
    plain, verbose = parsed.ops
    assert plain == inspector.Op(comm="0x7f8c496ae9f661", rank=2, n_ranks=8, coll="AllReduce", sn=1407,
                                 size_bytes=17179869184, time_us=61974.0, algbw_gbps=277.210914,
                                 busbw_gbps=485.119099, timing=None)
    assert plain.kernel_timed and plain.msg_bytes == 17179869184
    assert (verbose.coll, verbose.sn, verbose.timing, verbose.busbw_gbps) == ("ReduceScatter", 1231, "kernel_gpu",
                                                                              366.134533)
    # ReduceScatter's size is one rank's share: nccl-tests' S is 8 of them, and the Inspector's own
    # algbw is S over its time
    assert verbose.size_bytes == 2147483648 and verbose.msg_bytes == 17179869184
    assert verbose.msg_bytes / 1e9 / (verbose.time_us / 1e6) == pytest.approx(verbose.algbw_gbps, abs=1e-6)
    assert plain.msg_bytes / 1e9 / (plain.time_us / 1e6) == pytest.approx(plain.algbw_gbps, abs=1e-6)


def test_a_dump_dir_of_two_ranks():
    parsed = inspector.read_dir(str(TWO_RANKS))
    # rank 0: 7 records (a CPU-timed one, a Send, one under 8192 bytes among them), a line cut mid-record
    # and an object without coll_perf (2 bad); rank 1: 3 records and its last one still being written
    assert len(parsed.ops) == 10 and parsed.bad == 2
    assert [o.coll for o in parsed.ops if o.p2p] == ["Send"] and parsed.ops[5].peer == 1
    assert [o.timing for o in parsed.ops if not o.kernel_timed] == ["kernel_cpu"]
    ops = inspector.summarise(parsed.ops)
    assert ops == (InspectorOps("AllReduce", 1048576, AR_1M, (50.0, 52.0, 100.0, 55.0, 60.0)),
                   InspectorOps("AllGather", 1048576, (13.1072, 12.483048), (40.0, 42.0)),
                   InspectorOps("AllReduce", 4096, (0.455111,), (9.0,)))
    assert inspector.summary("all_reduce", 1048576, [ops]) == inspector.Summary(5, 19.065018, 55.0)
    assert inspector.summary("overlap", 1048576, [ops]) == inspector.Summary(5, 19.065018, 55.0)
    got = inspector.summary("all_gather", 1048576, [ops])  # S = 2 x 524288; median of two: their mean
    assert (got.ops, got.time_us) == (2, 41.0) and got.busbw_gbps == pytest.approx(12.795124)
    assert inspector.summary("all_gather", 524288, [ops]) == inspector.Summary(0, None, None)
    assert inspector.summary("send_recv", 1048576, [ops]) == inspector.Summary(0, None, None)  # p2p: left out


def test_the_same_record_read_twice_counts_once():
    ops = inspector.read_dir(str(TWO_RANKS)).ops
    assert inspector.summarise(ops + ops) == inspector.summarise(ops)


def test_garbage_and_partial_lines():
    good = (TWO_RANKS / "gpu-a-pid4102.log").read_text().splitlines()[0]
    parsed, used = inspector.parse("not json\n[1, 2]\n" + good + "\n{\"header\": 3}\n" + good[:40])
    assert (len(parsed.ops), parsed.bad) == (1, 2)  # up to the next "{" line: one skip; a header alone: one
    assert used == len("not json\n[1, 2]\n" + good + "\n{\"header\": 3}\n")  # the cut record is left unread
    assert inspector.parse("")[0].ops == [] and inspector.parse("\n\n")[1] == 2
    assert inspector.parse("garbage\n") == (inspector.Parsed([], 1), 8)
    nan = good.replace('"coll_busbw_gbs":19.065018', '"coll_busbw_gbs":"nan"')  # jsonDouble's NaN
    assert nan != good
    (op,) = inspector.parse(nan + "\n")[0].ops
    assert op.busbw_gbps is None and inspector.summarise([op]) == ()  # no bandwidth: not summarised


def test_a_dump_file_read_group_by_group(tmp_path):
    lines = (TWO_RANKS / "gpu-a-pid4101.log").read_text().splitlines(keepends=True)
    path = tmp_path / "gpu-a-pid4101.log"
    f = inspector.DumpFile(str(path))
    f.start_group()  # no file yet
    assert f.group_ops() == ()
    path.write_text(lines[0] + lines[1][:100])  # the second record half written
    assert f.group_ops() == (InspectorOps("AllReduce", 1048576, (20.97152,), (50.0,)),)
    with open(path, "a") as out:
        out.write(lines[1][100:] + lines[2])
    assert f.group_ops() == (InspectorOps("AllReduce", 1048576, (20.97152, 20.164923, 10.48576), (50.0, 52.0, 100.0)),)
    f.start_group()  # the next group: the earlier ones are passed over
    assert f.group_ops() == ()
    path.write_text(lines[5])  # the plugin set up again opens its file anew ("w"): shorter than what was read
    assert f.group_ops() == (InspectorOps("AllGather", 1048576, (13.1072,), (40.0,)),)
    with open(path, "a") as out:
        out.write(lines[4] + lines[7])
    f.group_ops()
    assert f.bad == 2


def test_enabled_and_where_it_writes(tmp_path):
    plugin = {"NCCL_PROFILER_PLUGIN": "/opt/nccl/libnccl-profiler-inspector.so"}
    assert not inspector.enabled({}) and not inspector.enabled({"NCCL_INSPECTOR_ENABLE": "1"})
    assert not inspector.enabled({**plugin, "NCCL_INSPECTOR_ENABLE": "0"}) and not inspector.enabled(plugin)
    assert inspector.enabled({**plugin, "NCCL_INSPECTOR_ENABLE": "1"})
    assert inspector.enabled({**plugin, "NCCL_INSPECTOR_ENABLE": " 2x"})  # atoi
    assert not inspector.enabled({**plugin, "NCCL_INSPECTOR_ENABLE": "yes"})
    assert not inspector.enabled({**plugin, "NCCL_INSPECTOR_ENABLE": "1", "NCCL_INSPECTOR_PROM_DUMP": "1"})
    assert inspector.dump_dir({"NCCL_INSPECTOR_DUMP_DIR": "/tmp/insp"}) == "/tmp/insp"
    assert inspector.dump_dir({}, cwd="/w") == "/w/nccl-inspector-unknown-jobid"
    assert inspector.dump_dir({"SLURM_JOBID": "4242"}, cwd="/w") == "/w/nccl-inspector-4242"
    assert inspector.dump_file_path("/tmp/insp", "gpu-a.example.com", 77) == "/tmp/insp/gpu-a.example.com-pid77.log"
    env = {**plugin, "NCCL_INSPECTOR_ENABLE": "1", "NCCL_INSPECTOR_DUMP_DIR": str(tmp_path)}
    assert inspector.DumpFile.for_process(env, "h", 5).path == f"{tmp_path}/h-pid5.log"
    assert inspector.DumpFile.for_process(plugin, "h", 5) is None


def _row(collective="all_reduce", msg_bytes=1048576, status="ok"):
    return {"run_id": "r", "collective": collective, "msg_bytes": msg_bytes, "status": status, "busbw_gbps": 18.0}


def test_rows_gain_the_columns_from_every_rank():
    ops = inspector.summarise(inspector.read_dir(str(TWO_RANKS)).ops)
    rank0 = tuple(o for o in ops if o.coll == "AllReduce")
    transports = [Transport("nccl", inspector=rank0), Transport("nccl", inspector=())]
    assert transport.inspector_fields(_row(), transports) == {
        "inspector_busbw_gbps": 19.065018, "inspector_time_us": 55.0, "inspector_ops": 5}
    # loaded, but nothing of this size written (under NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES, say)
    assert transport.inspector_fields(_row(msg_bytes=1024), transports) == {
        "inspector_busbw_gbps": None, "inspector_time_us": None, "inspector_ops": 0}
    assert transport.inspector_fields(_row(status="failed"), transports) == {}


def test_without_the_inspector_the_columns_are_null():
    transports = [Transport("nccl"), None, Transport("gloo", interface="eth0")]
    assert transport.inspector_fields(_row(), transports) == {}
    row = {**_row(), **transport.inspector_fields(_row(), transports)}
    back = rows_table([row]).to_pylist()[0]
    assert [back[c] for c in inspector.COLUMNS] == [None, None, None]
    assert ROW_SCHEMA.names[-3:] == list(inspector.COLUMNS)


def test_post_processing_fills_rows_from_a_dump_dir():
    rows = [_row(), _row("all_gather"), _row("all_to_all"), _row(status="timeout")]
    parsed = inspector.fill_rows(rows, str(TWO_RANKS))
    assert parsed.bad == 2
    assert (rows[0]["inspector_ops"], rows[0]["inspector_busbw_gbps"], rows[0]["inspector_time_us"]) == (5, 19.065018,
                                                                                                        55.0)
    assert rows[1]["inspector_ops"] == 2 and rows[1]["inspector_time_us"] == 41.0
    assert rows[2]["inspector_ops"] == 0 and rows[2]["inspector_busbw_gbps"] is None
    assert "inspector_ops" not in rows[3]
    back = rows_table(rows).to_pylist()
    assert back[0]["inspector_busbw_gbps"] == 19.065018 and back[3]["inspector_ops"] is None
    assert inspector.fill_rows([_row()], "/nonexistent/dir").ops == []
