"""An environment that does not answer: each ends in one line and exit 2 within the connect
timeout, writing nothing. Every address is on this machine: a closed loopback port, a listener
that accepts and never answers, an HTTP server that is not a Ray cluster."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.helpers import run_cli
from tests.synthetic import write_run

ENV = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root")}


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield s.getsockname()[1]


@pytest.fixture
def http_port():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


@pytest.fixture
def grpc_like_port():
    """A port that answers the HTTP/2 preface with SETTINGS, as a gRPC server does, and then
    never serves a call: ray.init's own waits on it have no bound."""
    conns = []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)

        def serve():
            while True:
                try:
                    conn, _ = s.accept()
                    conn.sendall(bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
                except OSError:
                    return
                conns.append(conn)

        threading.Thread(target=serve, daemon=True).start()
        yield s.getsockname()[1]
    for conn in conns:
        conn.close()


def _fails_in_one_line(args, env, tmp_path, within_s):
    out = tmp_path / "out"
    start = time.monotonic()
    proc = run_cli([*args, "--output", str(out)] if args[0] == "run" else args, env={**ENV, **env}, timeout=120)
    took_s = time.monotonic() - start
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-2000:]
    assert took_s < within_s, took_s
    assert not out.exists() and proc.stdout == ""
    return lines[0], took_s


def test_a_closed_port_is_retried_until_the_connect_timeout(tmp_path):
    """Retried (a head still starting is waited for), not given up on at once; the default timeout,
    30 s, is tests/unit/test_timeouts.py's."""
    port = _closed_port()
    line, took_s = _fails_in_one_line(["run", "--address", f"127.0.0.1:{port}"], {"COLLBENCH_CONNECT_TIMEOUT_S": "2"},
                                      tmp_path, within_s=20)
    assert line == f"collbench: error: --address 127.0.0.1:{port}: no Ray cluster answered in 2 s (connection refused)"
    assert took_s >= 1.9


def test_a_port_that_never_answers(tmp_path, silent_port):
    env = {"RAY_ADDRESS": f"127.0.0.1:{silent_port}", "COLLBENCH_CONNECT_TIMEOUT_S": "2"}
    line, _ = _fails_in_one_line(["run"], env, tmp_path, within_s=20)
    assert line == (f"collbench: error: $RAY_ADDRESS 127.0.0.1:{silent_port}: no Ray cluster answered in 2 s "
                    "(the port accepts connections but nothing answers)")


def test_a_server_that_is_not_ray(tmp_path, http_port):
    line, _ = _fails_in_one_line(["plan", "--address", f"127.0.0.1:{http_port}"], {}, tmp_path, within_s=20)
    assert f"--address 127.0.0.1:{http_port}: answers, but not as a Ray cluster does" in line


def test_a_grpc_server_that_never_serves_is_given_up_on_at_the_deadline(tmp_path, grpc_like_port):
    env = {"COLLBENCH_CONNECT_TIMEOUT_S": "3"}
    line, took_s = _fails_in_one_line(["plan", "--address", f"127.0.0.1:{grpc_like_port}"], env, tmp_path, within_s=20)
    assert line == (f"collbench: error: --address 127.0.0.1:{grpc_like_port}: could not join a Ray cluster there in "
                    "3 s (no answer to ray.init); collbench joins the cluster's GCS address (HOST:6379)")
    assert took_s >= 2.9


def test_the_job_server_address_is_named_as_such(tmp_path):
    # the address docs/deploy/cloud.md exports for `ray job submit`; nothing listens there
    line, _ = _fails_in_one_line(["plan"], {"RAY_ADDRESS": "http://127.0.0.1:8265"}, tmp_path, within_s=20)
    assert line.startswith("collbench: error: $RAY_ADDRESS http://127.0.0.1:8265: a Ray job-server (dashboard) "
                           "address; collbench joins the cluster's GCS address (HOST:6379)")


def test_a_gcs_bucket_that_never_answers(tmp_path, silent_port):
    uri = f"gs://bucket/x?endpoint_override=127.0.0.1:{silent_port}&scheme=http&anonymous=true"
    env = {"RAY_ADDRESS": "127.0.0.1:1", "COLLBENCH_CONNECT_TIMEOUT_S": "2"}
    proc_start = time.monotonic()
    proc = run_cli(["run", "--output", uri], env={**ENV, **env}, timeout=120)
    assert proc.returncode == 2 and time.monotonic() - proc_start < 20
    assert proc.stderr.strip().splitlines() == [f"collbench: error: --output {uri}: no answer from the object "
                                                "store in 2 s"]


@pytest.mark.parametrize("args, code", [(["report", "{out}"], 0), (["compare", "{out}", "{out}"], 1)])
def test_a_reader_that_leaves_early(tmp_path, args, code):
    """`collbench report R | head -1`: nothing on stderr beyond what the whole run says there (compare's
    verdict line), with the command's own exit code."""
    out = str(tmp_path / "res")
    write_run(out, "base", nodes=12, minute=0)
    write_run(out, "new", nodes=12, minute=5, drop={"msg_bytes": 1 << 20, "pattern": "intra", "factor": 0.5})
    argv = [sys.executable, "-m", "orchestrator", *(a.replace("{out}", out) for a in args)]
    if args[0] == "report":
        argv += ["--run", "new"]
    whole = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert whole.returncode == code, whole.stderr
    # `| head -1`, and a reader gone before the first line (the interpreter takes far longer to
    # start than this to close the pipe, so the command's first write meets a closed pipe)
    for lines_read in (1, 0):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(lines_read):
            assert proc.stdout.readline()
        proc.stdout.close()
        assert proc.wait(timeout=120) == code
        assert proc.stderr.read() == whole.stderr
