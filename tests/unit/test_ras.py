"""NCCL RAS (issue 34, part 2): the text and JSON answers parsed from NCCL's documented examples
(tests/fixtures/nccl/ras, README.md there), and the query against a fake RAS on 127.0.0.1 that speaks
the protocol of NCCL's src/ras/client.cc."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from orchestrator.execution import ras
from orchestrator.execution.ras import RasProcess, RasRank, RasReport

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl" / "ras"


def _read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_a_healthy_job_and_a_mismatch_miss_nothing():
    assert ras.parse(_read("status_healthy.txt")) == RasReport()
    # ranks behind in operation counts are a warning about progress, not ranks missing
    assert ras.parse(_read("status_mismatch.txt")) == RasReport()
    assert RasReport().summary() == "no process or rank missing"


def test_an_unresponsive_process_then_the_same_one_dead():
    incomplete = ras.parse(_read("status_incomplete.txt"))
    assert incomplete == RasReport(missing=(RasProcess(3487984, "172.16.64.213", "5"),), n_missing=1,
                                   ranks=(RasRank("cf264af53edbe986", 21),), timeouts=2)
    assert incomplete.summary() == ("1 sent no data: pid 3487984 on 172.16.64.213 (GPU 5); communicator "
                                    "cf264af53edbe986 misses rank 21; 2 RAS timeouts while gathering")
    dead = ras.parse(_read("status_dead.txt"))
    assert dead == RasReport(dead=(RasProcess(3487984, "172.16.64.213", "5"),), n_dead=1,
                             ranks=(RasRank("cf264af53edbe986", 21),))
    assert dead.summary() == "1 dead: pid 3487984 on 172.16.64.213 (GPU 5); communicator cf264af53edbe986 misses rank 21"


def test_ranks_with_their_processes_errors_and_a_filter_by_pid():
    report = ras.parse(_read("status_rank_lines_reconstructed.txt"))
    assert report.missing == (RasProcess(3487984, "172.16.64.213", "5"), RasProcess(3487986, "172.16.64.213", "6,7"))
    assert report.dead == (RasProcess(2405067, "172.16.64.222", "0 (NVML 4)"),)
    assert (report.n_missing, report.n_dead, report.timeouts) == (2, 1, 1)
    assert report.ranks == (RasRank("cf264af53edbe986", 21, 3487984, "172.16.64.213", "5"),
                            RasRank("cf264af53edbe986", 24, 2405067, "172.16.64.222", "0 (NVML 4)"),
                            RasRank("cf264af53edbe986", 30))
    assert report.errors == ("communicator cf264af53edbe986: Asynchronous errors on 2 ranks",)
    # a group of the processes 2405067 and 1: the other processes' entries are not its business
    assert report.summary({2405067, 1}) == (
        "1 dead: pid 2405067 on 172.16.64.222 (GPU 0 (NVML 4)); communicator cf264af53edbe986 misses ranks "
        "24 (pid 2405067 on 172.16.64.222), 30; communicator cf264af53edbe986: Asynchronous errors on 2 ranks; "
        "1 RAS timeout while gathering")


def test_the_json_answer_and_its_2_28_form():
    report = ras.parse(_read("status.json"))
    assert report == RasReport(missing=(RasProcess(1524345, "172.16.64.245", "1"),), n_missing=1,
                               ranks=(RasRank("ae94423cfbb2ef4a", 1, 1524345, "172.16.64.245", "1", False),))
    # NCCL 2.28.7-2.28.9 leave out the comma after a missing rank's nvml_dev
    assert ras.parse(_read("status_2.28.9_reconstructed.json")) == report
    with pytest.raises(ValueError):
        ras.parse("{ not json")


def test_json_errors_and_dead_ranks():
    text = _read("status.json").replace('"considered_dead": false', '"considered_dead": true').replace(
        '"async_error": 0', '"async_error": 6')
    report = ras.parse(text)
    assert report.dead == (RasProcess(1524345, "172.16.64.245", "1"),) and report.missing == ()
    assert report.errors == ("communicator ae94423cfbb2ef4a: rank 0 on 172.16.64.245 async_error 6",)
    assert report.summary() == ("1 dead: pid 1524345 on 172.16.64.245 (GPU 1); communicator ae94423cfbb2ef4a misses "
                                "rank 1 (pid 1524345 on 172.16.64.245) dead; communicator ae94423cfbb2ef4a: rank 0 "
                                "on 172.16.64.245 async_error 6")


@pytest.mark.parametrize("given, expected", [
    (None, ("10.0.0.2", 28028, "loopback")),
    ("localhost:28028", ("10.0.0.2", 28028, "loopback")),
    ("0.0.0.0:29000", ("10.0.0.2", 29000, None)),
    ("[::]:29001", ("10.0.0.2", 29001, None)),
    ("10.0.0.9:28028", ("10.0.0.9", 28028, None)),
    (":28030", ("10.0.0.2", 28030, None)),
])
def test_where_a_node_is_asked(given, expected):
    host, port, why = ras.address("10.0.0.2", given)
    assert (host, port, "loopback" if why and "localhost only" in why else why) == expected


class FakeRas:
    """One NCCL RAS client socket on 127.0.0.1: the handshake of src/ras/client.cc, then `answer`."""

    def __init__(self, answer: str, stall_s: float = 0.0, hello: str = f"SERVER PROTOCOL {ras.PROTOCOL}\n",
                 json_too: bool = True) -> None:
        """`json_too`: answers SET FORMAT json with OK, as NCCL 2.28.7+ does; else with an error,
        and serves a second connection (the text asked for again)."""
        self.answer, self.stall_s, self.hello, self.json_too = answer, stall_s, hello, json_too
        self.commands: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(5)
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        for _ in range(1 if self.json_too else 2):
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self._answer(conn)

    def _answer(self, conn) -> None:
        with conn, conn.makefile("rwb") as f:
            conn.settimeout(5)
            try:
                while line := f.readline().decode():
                    self.commands.append(line.strip())
                    word = line.split()[0].upper()
                    if word == "CLIENT":
                        time.sleep(self.stall_s)
                        f.write(self.hello.encode())
                    elif word == "SET" and not self.json_too:
                        f.write(b"ERROR: unknown command\n")
                    elif word in ("TIMEOUT", "SET"):
                        f.write(b"OK\n")
                    elif word == "STATUS":
                        for i in range(0, len(self.answer), 100):  # in pieces, as NCCL sends it
                            f.write(self.answer[i:i + 100].encode())
                            f.flush()
                        return
                    f.flush()
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        self.thread.join(5)


def test_query_speaks_the_protocol_and_parses_the_answer():
    server = FakeRas(_read("status_dead.txt"))
    answer = ras.query("127.0.0.1", f"127.0.0.1:{server.port}", timeout_s=5)
    server.close()
    assert answer.reason is None and answer.address == f"127.0.0.1:{server.port}"
    assert answer.report.n_dead == 1 and answer.report.dead[0].pid == 3487984
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "STATUS"]
    server = FakeRas(_read("status.json"))
    answer = ras.query("127.0.0.1", f"0.0.0.0:{server.port}", timeout_s=4, fmt="json")
    server.close()
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "SET FORMAT json", "STATUS"]
    assert answer.report.ranks[0].comm == "ae94423cfbb2ef4a"


def test_every_wait_ends():
    stalled = FakeRas("", stall_s=3)
    t0 = time.monotonic()
    answer = ras.query("127.0.0.1", f"127.0.0.1:{stalled.port}", timeout_s=0.5)
    assert time.monotonic() - t0 < 2 and answer.reason == "no answer within 0.5s" and answer.report is None
    stalled.close()
    stranger = FakeRas("", hello="HTTP/1.1 400 Bad Request\n")
    answer = ras.query("127.0.0.1", f"127.0.0.1:{stranger.port}", timeout_s=2)
    stranger.close()
    assert answer.reason == "not NCCL RAS: it answered 'HTTP/1.1 400 Bad Request'"
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    assert ras.query("127.0.0.1", f"127.0.0.1:{port}", timeout_s=2).reason == "Connection refused"


def test_the_hang_note():
    """Asked in JSON first; an NCCL that refuses it (before 2.28.7) is asked again for its text."""
    server = FakeRas(_read("status_rank_lines_reconstructed.txt"), json_too=False)
    recent = {}
    note = ras.hang_note(["127.0.0.1"], {3487984}, f"0.0.0.0:{server.port}", timeout_s=5, recent=recent)
    server.close()
    assert server.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 2", "SET FORMAT json",
                               "CLIENT PROTOCOL 2", "TIMEOUT 2", "STATUS"], server.commands
    in_json = FakeRas(_read("status.json"))
    said = ras.hang_note(["127.0.0.1"], {1}, f"0.0.0.0:{in_json.port}", timeout_s=5)
    in_json.close()
    assert in_json.commands[-2:] == ["SET FORMAT json", "STATUS"] and said.startswith("NCCL RAS (127.0.0.1:")
    # the next group that times out is told at once from the same answer, its own pids picked out
    t0 = time.monotonic()
    again = ras.hang_note(["127.0.0.1"], {999}, f"0.0.0.0:{server.port}", timeout_s=5, recent=recent)
    assert time.monotonic() - t0 < 0.5 and again.startswith(f"NCCL RAS (127.0.0.1:{server.port}): ")
    assert "3487984" not in again
    assert note == (f"NCCL RAS (127.0.0.1:{server.port}): 1 sent no data: pid 3487984 on 172.16.64.213 (GPU 5); "
                    "communicator cf264af53edbe986 misses ranks 21 (pid 3487984 on 172.16.64.213), 30; "
                    "communicator cf264af53edbe986: Asynchronous errors on 2 ranks; 1 RAS timeout while gathering")
    # NCCL's default address is loopback: a driver elsewhere is told why it cannot ask
    assert ras.hang_note(["10.0.0.2", "10.0.0.3"], {1}, None).startswith(
        "NCCL RAS: no answer (10.0.0.2:28028: NCCL RAS listens on localhost only")


def test_a_timed_out_group_asks_ras_only_where_the_workers_opened_it(monkeypatch):
    from types import SimpleNamespace

    from orchestrator.execution import runner as runner_module
    from orchestrator.execution.runner import Runner, _GroupRun
    from orchestrator.sweep.planner import Group
    from workloads.messages import Stage

    server = FakeRas(_read("status_dead.txt").replace("3487984", "4242"))
    ended = []

    def timed_out(env: dict) -> str:
        run = object.__new__(Runner)
        worker = SimpleNamespace(info=SimpleNamespace(comm_env=env))
        run.backend, run._ras_recent = "nccl", {}
        run.pool = SimpleNamespace(workers=[worker, worker], silent=lambda ranks: [])
        run._end = lambda r, status, failed, what, culprits=False: ended.append(what)
        base = {"node_ips": ["127.0.0.1", "127.0.0.1"], "hosts": ["a", "a"], "pids": [4242, 4243]}
        r = _GroupRun(Group("r0-g0", "intra", 0, (0, 1)), base, [], 0.0, 1.0, refs={Stage.JOIN: ["x", "y"]})
        run._timed_out(r)
        return ended[-1]

    monkeypatch.setattr(runner_module, "_is_ready", lambda ref: False)
    assert "NCCL RAS" not in timed_out({})  # NCCL's default: loopback only, nobody asked
    what = timed_out({"NCCL_RAS_ADDR": f"0.0.0.0:{server.port}"})
    server.close()
    assert what.endswith(f"; NCCL RAS (127.0.0.1:{server.port}): 1 dead: pid 4242 on 172.16.64.213 (GPU 5); "
                         "communicator cf264af53edbe986 misses rank 21")
