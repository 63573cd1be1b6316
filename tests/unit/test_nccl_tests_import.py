"""nccl-tests in and out (issue 34): its text tables and -J JSON read to the same numbers, written
as a run that report, compare and predict read; bad files and options refused in one line with
nothing written; `report --format nccl-tests` prints a run in nccl-tests' own layout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from orchestrator.results import nccl_tests
from tests.helpers import run_main
from tests.synthetic import write_cluster_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl_tests"
AR_8 = FIXTURES / "all_reduce_perf_8xH100.txt"
AG_213 = FIXTURES / "all_gather_perf_2x8_v2.13.txt"
A2A_I = FIXTURES / "alltoall_perf_per_iter.txt"
AR_JSON = FIXTURES / "all_reduce_perf.json"
# real outputs posted publicly, as posted (sources in SOURCE.md)
REAL_2X8 = FIXTURES / "all_reduce_perf_2x8_H100_a3mega.txt"
REAL_AR_1X4 = FIXTURES / "all_reduce_perf_1x4_GB300.txt"
REAL_A2A_1X4 = FIXTURES / "alltoall_perf_1x4_GB300.txt"
LINE_8G = ("  8589934592    2147483648     float     sum      -1  23558.1  364.63  638.10       0  23487.4  365.73"
           "  640.02       0")


def _parse(path: Path) -> list[nccl_tests.Section]:
    return nccl_tests.parse(str(path), path.read_bytes())


def _rows(out: Path, run_id: str) -> pd.DataFrame:
    df = pd.read_parquet(out)
    return df[df.run_id == run_id].sort_values(["group_id", "msg_bytes", "in_place"]).reset_index(drop=True)


def test_a_2_19_table_reads_back_to_its_numbers():
    [s] = _parse(AR_8)
    assert LINE_8G in AR_8.read_text().splitlines()
    assert (s.collective, s.binary, s.version, s.nccl_version) == ("all_reduce", "all_reduce_perf", "2.19.6", "2.28.3")
    assert s.command_line == "./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8"
    assert (s.iters, s.warmup, s.check_iters, s.avg_busbw_gbps) == (20, 1, 1, 215.408)
    assert [r.host for r in s.ranks] == ["dgx-h100-07"] * 8 and [r.device for r in s.ranks] == list(range(8))
    assert {r.gpu_model for r in s.ranks} == {"NVIDIA H100 80GB HBM3"} and s.ranks[3].pid == 48213
    assert len(s.results) == 31 and s.results[0].msg_bytes == 8  # the NCCL INFO line before the table is skipped
    last = s.results[-1]
    assert (last.msg_bytes, last.count, last.dtype, last.op, last.root) == (8589934592, 2147483648, "float32", "sum", -1)
    assert last.out_of_place == nccl_tests.Timing(23558.1, 364.63, 638.10, 0)
    assert last.in_place == nccl_tests.Timing(23487.4, 365.73, 640.02, 0)


def test_a_2_13_table_without_group_version_or_binary():
    [s] = _parse(AG_213)
    assert (s.collective, s.version, s.nccl_version, s.check_iters, s.warmup) == (None, None, None, 1, 5)
    assert [r.host for r in s.ranks] == ["node-a0"] * 8 + ["node-a1"] * 8 and s.ranks[15].pid == 7115
    g = s.results[-1]
    assert (g.msg_bytes, g.count, g.dtype, g.op) == (1073741824, 33554432, "float16", "none")
    assert g.out_of_place == nccl_tests.Timing(6025.2, 178.21, 167.07, 0)
    assert g.in_place == nccl_tests.Timing(6049.3, 177.5, 166.4, 0)
    assert s.avg_busbw_gbps == 107.96


def test_a_table_before_2_13_reads_by_its_header():
    """No root column, and `error` (the largest error, not a count of wrong elements): n_wrong null."""
    head = "#       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error"
    row = "  1310720000     327680000     float     sum   110234   11.89   11.89  0e+00   110102   11.90   11.90  0e+00"
    [s] = nccl_tests.parse("old.txt", f"# nThread 1 nGpus 1\n{head}\n{row}\n".encode())
    [r] = s.results
    assert (r.msg_bytes, r.root, r.out_of_place, r.in_place.busbw_gbps) == \
        (1310720000, -1, nccl_tests.Timing(110234.0, 11.89, 11.89, None), 11.90)


def test_per_iteration_columns_and_na_wrong():
    [s] = _parse(A2A_I)
    r = s.results[-1]
    assert (s.collective, r.msg_bytes, r.dtype, s.check_iters) == ("all_to_all", 67108864, "bfloat16", 0)
    assert r.out_of_place == nccl_tests.Timing(3090.4, 21.72, 19.0, None, {"min_us": 2874.07, "max_us": 3739.39,
                                                                            "p99_us": 3739.39, "cv_pct": 7.0})
    assert r.in_place.n_wrong is None and r.in_place.per_iter["min_us"] == 2902.82


def test_the_json_of_2_19_reads_back_to_its_numbers():
    [s] = _parse(AR_JSON)
    assert (s.collective, s.nccl_version, s.iters, s.start_time) == ("all_reduce", "2.28.3", 4, "2026-11-30 09:14:02")
    assert s.command_line.startswith("/opt/nccl-tests/build/all_reduce_perf -b 1M")
    assert [(r.rank, r.host, r.pid) for r in s.ranks] == [(0, "h100-0", 9100), (1, "h100-1", 9101)]
    r = s.results[-1]
    assert (r.msg_bytes, r.count, r.root) == (268435456, 67108864, -1)
    out = r.out_of_place
    assert (out.time_us, out.algbw_gbps, out.busbw_gbps, out.n_wrong) == (5995.232356, 44.774821, 44.774821, 0)
    assert out.per_iter["times_us"] == [6354.946297, 5875.327708, 5815.375385, 5935.280032]
    assert (out.per_iter["p50_us"], out.per_iter["cv_pct"]) == (5935.280032, 3.535534)
    assert s.avg_busbw_gbps == 35.018607
    older = AR_JSON.read_text().replace("average_bus_bandwidth", "average_bus_bandwidith").replace(
        '"bandwidth"', '"bandwidith"')  # the JSON's keys before nccl-tests' fix of February 2026
    assert nccl_tests.parse("old.json", older.encode())[0].avg_busbw_gbps == 35.018607


def test_real_posted_outputs_read_back_to_their_numbers():
    """Three outputs as their authors posted them (SOURCE.md): each read to the figures of its text."""
    [h100] = _parse(REAL_2X8)  # 2 hosts x 8 H100, -g 1 under mpirun, the command line quoted in Markdown
    assert (h100.collective, h100.version, h100.nccl_version) == ("all_reduce", None, None)
    assert h100.command_line == "/opt/src/nccl-tests/build/all_reduce_perf -b 8 -e 8G -f 2 -g 1"
    assert (h100.warmup, h100.iters, h100.check_iters, h100.avg_busbw_gbps) == (5, 20, 1, 70.742)
    assert [r.host for r in h100.ranks] == ["ztan-mig-235z"] * 8 + ["ztan-mig-gq73"] * 8
    assert [r.device for r in h100.ranks] == list(range(8)) * 2 and (h100.ranks[8].rank, h100.ranks[8].pid) == (8, 6733)
    assert {r.gpu_model for r in h100.ranks} == {"NVIDIA H100 80GB HBM3"} and len(h100.results) == 31
    big = h100.results[-1]
    assert (big.msg_bytes, big.count, big.dtype, big.op, big.root) == (8589934592, 2147483648, "float32", "sum", -1)
    assert big.out_of_place == nccl_tests.Timing(47535.0, 180.71, 338.82, 0)
    assert big.in_place == nccl_tests.Timing(47743.0, 179.92, 337.35, 0)
    assert h100.results[0].out_of_place == nccl_tests.Timing(135.8, 0.0, 0.0, 0)

    [ar] = _parse(REAL_AR_1X4)  # one GB300 tray, 4 GPUs; NCCL's banner names the library, no version line
    assert (ar.collective, ar.binary, ar.version, ar.nccl_version) == ("all_reduce", "all_reduce_perf", None, "2.28.7")
    assert (ar.warmup, ar.iters, ar.avg_busbw_gbps, len(ar.results)) == (1, 50, 446.673, 16)
    assert [(r.host, r.device, r.pid) for r in ar.ranks] == [("GPU-3882", 0, 563473), ("GPU-3882", 1, 563474),
                                                            ("GPU-3882", 2, 563475), ("GPU-3882", 3, 563478)]
    big = ar.results[-1]
    assert (big.msg_bytes, big.count) == (17179869184, 4294967296)
    assert big.out_of_place == nccl_tests.Timing(37610.0, 456.79, 685.19, 0)
    assert big.in_place == nccl_tests.Timing(37605.0, 456.85, 685.27, 0)

    [a2a] = _parse(REAL_A2A_1X4)  # alltoall: in-place is not checked (#wrong N/A)
    assert (a2a.collective, a2a.nccl_version, a2a.avg_busbw_gbps, len(a2a.ranks)) == \
        ("all_to_all", "2.28.7", 381.478, 4)
    big = a2a.results[-1]
    assert (big.msg_bytes, big.count, big.dtype, big.op) == (17179869184, 1073741824, "float32", "none")
    assert big.out_of_place == nccl_tests.Timing(20527.0, 836.92, 627.69, 0)
    assert big.in_place == nccl_tests.Timing(18929.0, 907.60, 680.70, None)
    for s in (h100, ar, a2a):  # every row read: the mean of its busbw cells (each rounded to 0.005) is the footer's
        busbw = [t.busbw_gbps for r in s.results for t in (r.out_of_place, r.in_place)]
        assert sum(busbw) / len(busbw) == pytest.approx(s.avg_busbw_gbps, abs=0.005)


def test_real_posted_outputs_import_as_a_run(tmp_path):
    out = tmp_path / "r"
    proc = run_main(["import", str(REAL_2X8), str(REAL_AR_1X4), str(REAL_A2A_1X4), "--output", str(out),
                     "--run-id", "real"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"collbench: imported 126 row(s) in 3 group(s) from 3 file(s) as run real in {out}"
    rows = _rows(out, "real")
    h100 = rows[(rows.group_id == "import-0") & (rows.msg_bytes == 8589934592)].set_index("in_place")
    assert (h100.loc[False, "time_us"], h100.loc[False, "algbw_gbps"], h100.loc[False, "busbw_gbps"]) == \
        (47535.0, 180.71, 338.82)
    assert (h100.loc[True, "time_us"], h100.loc[True, "algbw_gbps"], h100.loc[True, "busbw_gbps"]) == \
        (47743.0, 179.92, 337.35)
    one = h100.loc[False]
    assert (one.world_size, one.n_nodes, one.ranks_per_node, one.topology, one.n_wrong) == (16, 2, 8, "mixed", 0)
    assert list(one.hosts) == ["ztan-mig-235z"] * 8 + ["ztan-mig-gq73"] * 8
    assert list(one.local_ranks) == list(range(8)) * 2
    assert (one.collective, one.iters, one.gpu_model) == ("all_reduce", 20, "NVIDIA H100 80GB HBM3")
    ar = rows[(rows.group_id == "import-1") & (rows.msg_bytes == 17179869184) & rows.in_place].iloc[0]
    assert (ar.time_us, ar.algbw_gbps, ar.busbw_gbps, ar.n_wrong) == (37605.0, 456.85, 685.27, 0)
    assert (ar.world_size, ar.n_nodes, ar.topology, ar.nccl_version, list(ar.hosts)) == \
        (4, 1, "intra", "2.28.7", ["GPU-3882"] * 4)
    a2a = rows[(rows.group_id == "import-2") & (rows.msg_bytes == 17179869184)].set_index("in_place")
    assert (a2a.loc[False, "collective"], a2a.loc[False, "busbw_gbps"], a2a.loc[False, "n_wrong"]) == \
        ("all_to_all", 627.69, 0)
    assert (a2a.loc[True, "time_us"], a2a.loc[True, "busbw_gbps"]) == (18929.0, 680.70)
    assert pd.isna(a2a.loc[True, "n_wrong"])  # #wrong N/A: not checked
    manifest = json.loads((out / "_runs" / "real.json").read_text())
    assert [(s["binary"], s["avg_busbw_gbps"]) for s in manifest["sources"]] == \
        [("all_reduce_perf", 70.742), ("all_reduce_perf", 446.673), ("alltoall_perf", 381.478)]


def test_a_shell_prompt_or_quote_before_the_command_line_is_not_part_of_it():
    table = "\n".join(AR_8.read_text().splitlines()[1:]) + "\n"  # the fixture less its command line
    for prefix in ("$ ", ">    ", "> "):
        [s] = nccl_tests.parse("log.txt", f"{prefix}./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8\n{table}".encode())
        assert s.command_line == "./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8" and s.collective == "all_reduce"


def test_nccl_s_banner_names_the_library_where_no_version_line_does():
    text = AR_8.read_text().replace("# Using devices", "NCCL version 2.21.5+cuda12.4\n# Using devices")
    [s] = nccl_tests.parse("log.txt", text.encode())
    assert s.nccl_version == "2.28.3"  # the '# nccl-tests version ... nccl-library=' line wins
    no_line = "\n".join(line for line in text.splitlines() if not line.startswith("# nccl-tests version"))
    [s] = nccl_tests.parse("log.txt", no_line.encode())
    assert (s.version, s.nccl_version, len(s.results)) == (None, "2.21.5", 31)


def test_other_output_inside_a_table_is_passed_over():
    text = AR_8.read_text().replace(LINE_8G, "dgx-h100-07:48213:48300 [3] NCCL INFO Channel 00/0 : 3[3] -> 4[4] via "
                                    "P2P/CUMEM\nWarning: Permanently added 'dgx-h100-08' to the list of known hosts.\n"
                                    + LINE_8G)
    [s] = nccl_tests.parse("log.txt", text.encode())
    assert len(s.results) == 31 and s.results[-1].out_of_place.busbw_gbps == 638.10


def test_names_of_binaries_and_versions():
    assert nccl_tests.collective_of("/x/build/alltoall_perf_mpi") == "all_to_all"
    assert nccl_tests.collective_of("sendrecv_perf") == "send_recv"
    assert nccl_tests.collective_of("mpirun") is None
    assert nccl_tests.collective_of("./build/alltoallv_perf") == "all_to_allv"  # its busbw is ours (README)
    with pytest.raises(KeyError, match="gather_perf measures gather"):
        nccl_tests.collective_of("./gather_perf")
    assert (nccl_tests.nccl_version(22005), nccl_tests.nccl_version(2708)) == ("2.20.5", "2.7.8")


def test_an_import_is_a_run_that_report_compare_and_predict_read(tmp_path):
    out = tmp_path / "results"
    proc = run_main(["import", str(AR_8), "--output", str(out), "--run-id", "base"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"collbench: imported 62 row(s) in 1 group(s) from 1 file(s) as run base in {out}"
    rows = _rows(out, "base")
    assert len(rows) == 62 and set(rows.status) == {"ok"} and set(rows.topology) == {"intra"}
    big = rows[(rows.msg_bytes == 8589934592) & ~rows.in_place].iloc[0]
    assert (big.time_us, big.algbw_gbps, big.busbw_gbps, big.n_wrong) == (23558.1, 364.63, 638.10, 0)
    assert (big.time_us_batch, big.busbw_gbps_batch, big["count"]) == (23558.1, 638.10, 2147483648)
    assert (big.world_size, big.n_nodes, big.ranks_per_node, big.pattern, big.backend) == (8, 1, 8, "intra", "nccl")
    assert list(big.hosts) == ["dgx-h100-07"] * 8 and list(big.local_ranks) == list(range(8))
    assert (big.gpu_model, big.nccl_version, big.iters, big["dtype"], big.op) == \
        ("NVIDIA H100 80GB HBM3", "2.28.3", 20, "float32", "sum")
    manifest = json.loads((out / "_runs" / "base.json").read_text())
    assert (manifest["command"], manifest["state"], manifest["backend"]) == ("import", "finished", "nccl")
    [source] = manifest["sources"]  # nested in the file, not JSON in a string
    assert source["path"] == str(AR_8) and source["nccl_tests_version"] == "2.19.6"
    assert source["command_line"] == "./build/all_reduce_perf -b 8 -e 8G -f 2 -g 8" and source["format"] == "text"

    report = run_main(["report", str(out), "--format", "json"])
    assert report.returncode == 0, report.stderr
    peaks = json.loads(report.stdout)["tables"]["peaks"]
    assert [(p["topology"], p["world_size"], p["peak_busbw"]) for p in peaks] == [("intra", 8, 639.06)]

    text = run_main(["report", str(out)])
    assert text.returncode == 0 and "imported from nccl-tests output by collbench" in text.stdout.splitlines()[1]

    same = run_main(["report", str(out), "--format", "nccl-tests"])
    assert same.returncode == 0 and LINE_8G in same.stdout.splitlines()
    assert "# Collective test starting: all_reduce_perf" in same.stdout

    slow = tmp_path / "slow.txt"  # the 8 GiB out-of-place row at half its speed
    slow.write_text(AR_8.read_text().replace("  23558.1  364.63  638.10", "  47116.2  182.32  319.05"))
    assert run_main(["import", str(slow), "--output", str(out), "--run-id", "new"]).returncode == 0
    compared = run_main(["compare", str(out), "--baseline-run", "base", "--new-run", "new", "--format", "json"])
    assert compared.returncode == 1, compared.stderr
    matched = json.loads(compared.stdout)["tables"]["matched"]
    assert len(matched) == 62
    assert [(m["msg_bytes"], m["in_place"], m["busbw_change"]) for m in matched if m["flag"]] == \
        [(8589934592, False, -0.5)]
    assert run_main(["compare", str(out), "--baseline-run", "base", "--new-run", "base"]).returncode == 2

    predicted = run_main(["predict", str(out), "--run", "base", "--params", "7B", "--dp", "8",
                          "--ranks-per-node", "8", "--format", "json"])
    assert predicted.returncode == 0, predicted.stderr
    assert "all_reduce intra world 8" in predicted.stdout


def test_per_iteration_figures_and_hosts_of_a_json_import(tmp_path):
    out = tmp_path / "r"
    assert run_main(["import", str(AR_JSON), str(A2A_I), "--output", str(out), "--run-id", "j"]).returncode == 0
    rows = _rows(out, "j")
    ar = rows[(rows.group_id == "import-0") & (rows.msg_bytes == 268435456) & ~rows.in_place].iloc[0]
    assert (ar.topology, ar.world_size, ar.n_nodes, list(ar.node_ips)) == ("inter", 2, 2, ["h100-0", "h100-1"])
    assert list(ar.iter_time_us) == [6354.946297, 5875.327708, 5815.375385, 5935.280032]
    assert (ar.time_us_min, ar.time_us_max, ar.time_us_p50, ar.time_us_p99) == \
        (5815.375385, 6354.946297, 5935.280032, 6354.946297)
    assert ar.time_cv == pytest.approx(0.03535534, abs=1e-15)
    a2a = rows[(rows.group_id == "import-1") & (rows.msg_bytes == 67108864) & rows.in_place].iloc[0]
    assert (a2a.collective, a2a.topology, a2a.n_nodes, a2a.ranks_per_node) == ("all_to_all", "mixed", 2, 4)
    assert pd.isna(a2a.n_wrong) and a2a.time_us_min == 2902.82 and a2a.time_cv == pytest.approx(0.07)
    assert a2a["count"] == 67108864 // 2  # collbench's count: the elements of msg_bytes (nccl-tests prints per rank)


def test_hosts_collective_and_several_tests_in_one_file(tmp_path):
    out = tmp_path / "r"
    log = tmp_path / "two.log"  # two binaries' output in one log: two groups
    log.write_text(AR_8.read_text() + A2A_I.read_text())
    assert run_main(["import", str(log), "--output", str(out), "--run-id", "two"]).returncode == 0
    rows = _rows(out, "two")
    assert rows.groupby("group_id").collective.first().to_dict() == {"import-0": "all_reduce", "import-1": "all_to_all"}
    proc = run_main(["import", str(AG_213), "--output", str(out), "--run-id", "ag", "--collective", "all_gather_perf",
                     "--hosts", "a,b", "--topology", "mixed"])
    assert proc.returncode == 0, proc.stderr
    ag = _rows(out, "ag").iloc[0]
    assert ag.collective == "all_gather" and list(ag.hosts) == ["a"] * 8 + ["b"] * 8 and ag.ranks_per_node == 8
    back = run_main(["report", str(out), "--run", "ag", "--format", "nccl-tests"]).stdout
    assert "  1073741824      33554432      half    none      -1  6025.20  178.21  167.07       0" in back


def _junk_files(tmp: Path) -> list[tuple[Path, str]]:
    binary = tmp / "core.bin"
    binary.write_bytes(b"# nThread 1\n\x7fELF\x02\x01\x01\x00\x00junk")
    bad_size = tmp / "bad_size.txt"
    bad_size.write_text(AR_8.read_text().replace("  8589934592    2147483648", "          8G    2147483648"))
    empty = tmp / "empty.txt"
    empty.write_text("\n  \n")
    other = tmp / "other.json"
    other.write_text(json.dumps({"benchmarks": [{"name": "x", "real_time": 1.0}]}))
    torn = tmp / "torn.json"
    torn.write_text(AR_JSON.read_text()[:500])
    bad_type = tmp / "bad_type.json"
    bad_type.write_text(AR_JSON.read_text().replace('"type":"float"', '"type":"quad"', 1))
    gather = tmp / "gather.txt"
    gather.write_text(AR_8.read_text().replace("all_reduce_perf", "gather_perf"))
    torn_row = tmp / "torn_row.txt"  # killed while printing the last row
    torn_row.write_text(AR_8.read_text().split(LINE_8G)[0] + LINE_8G[:60] + "\n")
    bad_bw = tmp / "bad_bw.txt"
    bad_bw.write_text(AR_8.read_text().replace("364.63  638.10", "364.63  fast!!"))
    no_table = tmp / "no_table.txt"
    no_table.write_text("\n".join(AR_8.read_text().splitlines()[:12]) + "\n")
    return [(binary, "line 2: binary data"), (bad_size, "line 50: size '8G' is not a whole number"),
            (empty, "empty"), (other, "a JSON of another shape"), (torn, "line 1: not valid JSON"),
            (bad_type, "results[0].type: 'quad' is not an nccl-tests type"),
            (gather, "gather_perf measures gather, which collbench has no collective for"),
            (no_table, "no nccl-tests result table"), (bad_bw, "line 50: busbw 'fast!!' is not a number"),
            (torn_row, "line 50: 6 fields where the table's header has 13")]


def test_hostile_files_are_refused_in_one_line_and_nothing_is_written(tmp_path):
    for path, said in _junk_files(tmp_path):
        out = tmp_path / f"out-{path.stem}"
        proc = run_main(["import", str(AR_8), str(path), "--output", str(out)])  # a good file first: still nothing
        assert proc.returncode == 2, (path, proc.stdout, proc.stderr)
        assert proc.stderr.count("\n") == 1 and proc.stderr.startswith(f"collbench: error: {path}"), proc.stderr
        assert said in proc.stderr, proc.stderr
        assert not out.exists() and proc.stdout == ""


def test_a_write_that_fails_part_way_leaves_no_run(tmp_path, monkeypatch):
    from orchestrator.results.store import ResultStore

    def full(self, manifest):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ResultStore, "write_manifest", full)
    out = tmp_path / "r"
    proc = run_main(["import", str(AR_8), str(AR_JSON), "--output", str(out), "--run-id", "x"])
    assert proc.returncode == 1 and proc.stderr == \
        f"collbench: error: {out}: writing run x failed (No space left on device); nothing of it kept\n"
    assert list(out.rglob("*.parquet")) == [] and not (out / "x").exists()
    assert [p.name for p in out.rglob("*") if p.is_file()] == []  # nor the run's lock


@pytest.mark.parametrize("args,said", [
    (["--topology", "inter"], "--topology inter: the 8 ranks of"),
    (["--hosts", "a,b,c"], "--hosts: 3 host(s) for the 8 ranks of"),
    (["--hosts", "a,,b"], "--hosts: '' is not a host name"),
    (["--run-id", "../up"], "--run-id '../up': letters, digits"),
    (["--collective", "gather"], "--collective 'gather': one of all_reduce"),
    (["--topology", "ring"], "argument --topology: invalid choice: 'ring'"),
])
def test_bad_options_are_refused_in_one_line(tmp_path, args, said):
    proc = run_main(["import", str(AR_8), "--output", str(tmp_path / "r"), *args])
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and said in proc.stderr, proc.stderr
    assert not (tmp_path / "r").exists()


def test_a_contradicting_collective_and_split_groups_are_refused(tmp_path):
    out = str(tmp_path / "r")
    proc = run_main(["import", str(AR_8), "--output", out, "--collective", "all_gather"])
    assert proc.returncode == 2 and "--collective all_gather: " in proc.stderr
    assert "says it is all_reduce_perf's output (all_reduce)" in proc.stderr
    split = tmp_path / "split.txt"  # NCCL_TESTS_SPLIT="MOD 2": two groups of 4 ranks at once
    split.write_text(AR_8.read_text().replace("#  Rank  1 Group  0", "#  Rank  1 Group  1"))
    proc = run_main(["import", str(split), "--output", out])
    assert proc.returncode == 2 and "its ranks ran as 2 groups at once (NCCL_TESTS_SPLIT)" in proc.stderr
    assert not os.path.exists(out)


def test_missing_file_collective_and_an_existing_run_are_refused(tmp_path):
    out = str(tmp_path / "r")
    missing = run_main(["import", str(tmp_path / "nope.txt"), "--output", out])
    assert missing.returncode == 2 and "nope.txt: cannot read it (No such file or directory)" in missing.stderr
    unnamed = run_main(["import", str(AG_213), "--output", out])
    assert unnamed.returncode == 2 and "does not say which nccl-tests binary wrote it; name it with --collective" \
        in unnamed.stderr
    assert run_main(["import", str(AR_8), "--output", out, "--run-id", "one"]).returncode == 0
    again = run_main(["import", str(AR_8), "--output", out, "--run-id", "one"])
    assert again.returncode == 2 and f"--run-id one: {out} holds that run already" in again.stderr
    assert sorted(os.listdir(out)) == ["_runs", "one"] and os.listdir(os.path.join(out, "_runs")) == ["one.json"]


def test_the_python_api_imports_as_the_command_does(tmp_path):
    from orchestrator import api
    from orchestrator.errors import UsageError

    done = api.import_nccl_tests(str(AR_JSON), str(tmp_path / "r"), run_id="py")
    assert (done.run_id, done.rows, done.groups) == ("py", 6, 1) and done.sources[0]["format"] == "json"
    assert api.report(str(tmp_path / "r"), run_id="py").run["command"] == "import"
    with pytest.raises(UsageError, match="--topology intra: the 2 ranks of"):
        api.import_nccl_tests([str(AR_JSON)], str(tmp_path / "q"), topology="intra")


def test_help_explains_every_option():
    proc = run_main(["import", "--help"])
    assert proc.returncode == 0
    for option in ("--output", "--hosts", "--topology", "--run-id", "--collective", "PATH"):
        assert option in proc.stdout
    report = " ".join(run_main(["report", "--help"]).stdout.split())
    assert "nccl-tests: the run's ok rows in nccl-tests' own table layout" in report


def test_a_collbench_run_in_nccl_tests_layout(tmp_path):
    """A sweep's groups of one shape are one block, each size the median over them."""
    out = str(tmp_path / "r")
    write_cluster_run(out, "sweep", nodes=2, ranks_per_node=2, patterns=("intra",), sizes=[1 << 20, 1 << 24])
    proc = run_main(["report", out, "--format", "nccl-tests"])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    titles = [line for line in lines if line.startswith("# collbench run sweep")]
    assert titles == ["# collbench run sweep: all_reduce float32 sum, topology intra, 2 rank(s) on 1 node(s), "
                      "median of 2 group(s)"]
    # intra at 40 GB/s busbw on 2 ranks (factor 1), 20 us latency; in place only: the out-of-place columns blank
    t = 20.0 + (1 << 24) / (40.0 * 1e3)
    busbw = (1 << 24) / t / 1e3
    row = "%12li  %12li  %8s  %6s  %6s" % (1 << 24, 1 << 22, "float", "sum", "    -1") + " " * 32 + \
        "  %7.2f  %6.2f  %6.2f  %6g" % (t, busbw, busbw, 0)
    assert row in lines
    assert run_main(["report", out, "--format", "nccl-tests", "--table", "busbw"]).returncode == 2


def test_the_imported_8xh100_sample_is_compared_with_an_nvlink_entry_never_a_networks(tmp_path):
    """Issue 57: an import says no transport; its intra rows on an H100 are judged against the
    NVLink entry (the class assumed inside a node, said in the table), never a RoCE or IB floor."""
    import json

    from tests.helpers import run_main

    assert run_main(["import", str(AR_8), "--output", str(tmp_path / "r")]).returncode == 0
    rep = json.loads(run_main(["report", str(tmp_path / "r"), "--table", "expected", "--format", "json"]).stdout)
    rows = rep["tables"]["expected"]
    assert rows and {(r["transport_class"], r["expected"], r["topology"]) for r in rows} == {
        ("NVLink (assumed: the rows name no transport)", 370.0, "intra")}
    assert all("nccl-tests#212" in r["source"] for r in rows)
