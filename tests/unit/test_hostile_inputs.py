"""Every subcommand against a generated list of hostile values and broken files (issue 26): each
case exits 2 with one `collbench: error:` line on stderr, no traceback, nothing on stdout,
nothing written, and none reaches Ray or brings a lab up (the calls that would are replaced by
a tripwire). The CLI runs in this process (orchestrator.cli:main), so hundreds of cases take
seconds."""

from __future__ import annotations

import json
import os
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.offline import Tripwire, call
from tests.synthetic import write_run

RUN = "r1"
_PLAN = ["--inventory", "2x2cpu"]  # plan without it would ask the live cluster

# -- hostile values -------------------------------------------------------------------------
_JUNK = ["", " ", "\t\n", "\x00", "a\x00b", "💥", "\u202eevil", "x" * 5000, "-", "--", "{}", "[1]", "null"]
_NUMBERS = ["nan", "NaN", "inf", "-inf", "+inf", "Infinity", "1e30", "-1e30", "1e400", "9" * 40, "-9" * 1 + "9" * 40,
            "1.5.2", "0x10", "1,5", "١٢٣x"]
BAD_INT = _JUNK + _NUMBERS + ["-1", "1.5", "1e3"]
BAD_FLOAT = _JUNK + ["nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "-1", "1e30", "0x10", "1,5"]
BAD_BYTES = _JUNK + _NUMBERS + ["-1", "0", "1.5K", "1Q", "9" * 40 + "G", "1e3K"]
BAD_LIST = ["", " ", ",", ", ,", "\x00", "💥", "x" * 5000, "a\x00b", "nope", "all_reduce,💥"]
BAD_PATTERN = BAD_LIST + ["kbatch:", "kbatch:1", "kbatch:x", "kbatch:" + "9" * 40, "kbatch:-2"]
BAD_ENV = ["", "=", "=1", "NCCL_X", "LD_PRELOAD=x", "NCCL_X=a\x00b", "NCCL_\x00=1", "NCCL_A B=1", "💥=1"]
BAD_TEXT = ["", " ", "\t", "\x00", "a\x00b", "x" * 5000, "\u202e"]

# Options of the sweep (run, and plan/qualify where they take them) and the values they refuse.
SPEC_OPTIONS = {
    "--min-bytes": BAD_BYTES, "--max-bytes": BAD_BYTES + ["2T"], "--step-factor": BAD_INT + ["0", "1"],
    "--iters": BAD_INT + ["0"], "--warmup": BAD_INT, "--check": BAD_INT, "--root": BAD_INT,
    "--ranks-per-node": BAD_INT + ["0"], "--wait-nodes": BAD_INT + ["99999999"], "--group-timeout": BAD_FLOAT + ["0"], "--deadline-rate": BAD_FLOAT + ["0"],
    "--compute-flops": BAD_FLOAT, "--group-sizes": [v for v in BAD_INT if v != "1,5"] + ["0", "2,,x", ","], "--collectives": BAD_LIST,
    "--dtypes": BAD_LIST, "--op": BAD_LIST, "--backend": BAD_LIST, "--patterns": BAD_PATTERN, "--env": BAD_ENV,
    "--expect-net": BAD_TEXT, "--output": ["", "\x00", "a\x00b", "x" * 300, "{tmp}/" + "y" * 300 + "/z",
                                           "x/" * 3000, "/proc/collbench", "/dev/null", "{bin}", "s3://",
                                           "gs://b?colour=red", "nope://x"],
    "--address": ["", " ", "\x00", "a\x00b:6379", "💥", "host", "host:", "host:0", "host:99999", "host:x",
                  "http://h:8265", "x" * 5000],
    "--config": ["{bin}", "{dir}", "{missing}", "/proc/self/mem", "{nul}", "{bomb}", "{deep}", "{yaml_list}",
                 "{yaml_scalar}", "{yaml_broken}", "{cfg_nan}", "{cfg_inf}", "{cfg_huge}", "{cfg_env_list}",
                 "{cfg_nested}", "{cfg_unknown}", "{cfg_flops_nan}", "{cfg_iters_huge}", "{cfg_python}",
                 "{cfg_keys}", "{cfg_output_int}", "{bad_utf8}"],
}
PLAN_OPTIONS = ("--collectives", "--dtypes", "--op", "--min-bytes", "--max-bytes", "--step-factor", "--root", "--iters",
                "--warmup", "--check", "--output",
                "--backend", "--patterns", "--group-sizes", "--ranks-per-node", "--config")
QUALIFY_OPTIONS = ("--collectives", "--dtypes", "--min-bytes", "--max-bytes", "--step-factor", "--iters", "--warmup",
                   "--check", "--backend", "--ranks-per-node", "--wait-nodes", "--group-timeout", "--deadline-rate", "--output",
                   "--address", "--env", "--expect-net", "--config")
BAD_PATHS = ["", " ", "\x00", "{missing}", "{bin}", "{empty}", "{dir}", "/proc/self/mem", "/dev/null",
             "{truncated}", "{garbage_parquet}", "{only_foreign}", "{newer}", "x" * 5000, "{tmp}/" + "y" * 300]
BAD_EXPECTED = ["{bin}", "{dir}", "{missing}", "/proc/self/mem", "{yaml_broken}", "{yaml_scalar}", "{exp_inf}",
                "{exp_nan}", "{exp_coll}", "{exp_keys}", "{exp_topology}", "{exp_min_world_inf}", "{exp_min_bytes}",
                "{exp_neg}", "{exp_str}", "{exp_scalars}", "{exp_platform}", "{bomb}", "{deep}", "{bad_utf8}"]
PREDICT_INTS = ("--dp", "--tp", "--pp", "--layers", "--hidden", "--seq", "--micro-batch", "--micro-batches",
                "--ranks-per-node", "--gpus-per-node")


DUMPS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "flight_recorder",
                     "ddp")  # a real job's Flight Recorder dumps


def _cases() -> list[tuple[str, list[str]]]:
    cases = []
    for opt, values in SPEC_OPTIONS.items():
        cases += [(f"run {opt}={v!r}", ["run", f"{opt}={v}"]) for v in values]
        if opt in PLAN_OPTIONS:
            cases += [(f"plan {opt}={v!r}", ["plan", *_PLAN, f"{opt}={v}"]) for v in values]
        if opt in QUALIFY_OPTIONS:
            cases += [(f"qualify {opt}={v!r}", ["qualify", f"{opt}={v}"]) for v in values]
    cases += [(f"run {a!r}", ["run", *a]) for a in (
        ["-b", "1M", "-e", "1K"], ["--backend", "gloo", "-d", "float8_e4m3"], ["--retry-failed"], ["--nope"],
        ["-n"], ["--concurrent=x"], ["--allow-failures", "x"], ["-d", "all", "--backend", "gloo", "-d", "x"])]
    cases += [(f"plan --inventory={v!r}", ["plan", f"--inventory={v}"]) for v in (
        "", " ", "\x00", "x", "0x8", "8x0", "-1x8", "1e3x8", "8x8gpu", "100000000x8", "8x100000000", "9" * 40 + "x8",
        "8x" + "9" * 40, "2x2cpu\x00", "💥")]
    cases += [(f"plan {a!r}", ["plan", *_PLAN, *a]) for a in (
        ["--backend", "nccl"], ["--group-sizes", "64"], ["--patterns", "pairwise", "--inventory", "1x2cpu"],
        ["--root", "5"], ["--group-timeout", "5"], ["--env", "A=1"])]
    cases += [(f"qualify {a!r}", ["qualify", *a]) for a in (
        ["-d", "all"], ["-d", "float32,float16"], ["--collectives", "all_reduce,broadcast"], ["--threshold", "nan"],
        ["--threshold", "inf"], ["--threshold", "0"], ["--threshold", "5"], ["--min-fraction", "nan"],
        ["--min-fraction", "inf"], ["--min-fraction", "0"], ["--format", "csv"], ["--seed", "x"])]
    cases += [(f"qualify --expected={v!r}", ["qualify", f"--expected={v}"]) for v in BAD_EXPECTED]
    # report: bad dataset paths, then bad options against a good dataset
    for cmd in ("report", "predict"):
        extra = ["--params", "7B", "--dp", "8"] if cmd == "predict" else []
        cases += [(f"{cmd} PATH={v!r}", [cmd, v, *extra]) for v in BAD_PATHS]
        cases += [(f"{cmd} --run={v!r}", [cmd, "{good}", f"--run={v}", *extra]) for v in BAD_TEXT + ["nope", "../r1"]]
    cases += [(f"report --expected={v!r}", ["report", "{good}", f"--expected={v}"]) for v in BAD_EXPECTED]
    cases += [(f"report {a!r}", ["report", "{good}", *a]) for a in (
        ["--threshold", "nan"], ["--threshold", "inf"], ["--threshold", "-inf"], ["--threshold", "x"],
        ["--threshold", "0"], ["--threshold", "10"], ["--min-fraction", "nan"], ["--min-fraction", "inf"],
        ["--min-fraction", "0"], ["--min-fraction", "1.5"], ["--min-fraction", ""], ["--unit", "bps"],
        ["--format", "xml"], ["--table", "nope"], ["--table", ""], ["--collective", "nope"], ["--collective", ""],
        ["--collective", "\x00"], ["--format", "csv"], ["--csv-dir", "{tmp}/csv"],
        ["--format", "csv", "--csv-dir", "{bin}"], ["--format", "csv", "--csv-dir", "/proc/collbench"],
        ["--format", "csv", "--csv-dir", "{bin}/below"], ["--format", "csv", "--csv-dir", ""],
        ["--format", "csv", "--csv-dir", "\x00"], ["--format", "csv", "--csv-dir", "{tmp}/" + "y" * 300],
        ["--format", "csv", "--csv-dir", "/proc/self"], ["--plots", "{good}/inside"], ["--plots", "/dev/null/x"],
        ["--plots", "{bin}"], ["--plots", "{bin}/below"], ["--plots", "/proc/collbench"])]
    cases += [(f"run --resume {RUN} --output={v!r}", ["run", "--resume", RUN, f"--output={v}"])
              for v in ("{deep_manifest}", "{list_manifest}", "{no_spec_manifest}")]
    cases += [(f"compare {a!r}", ["compare", *a]) for a in (
        *([v, "{good}"] for v in BAD_PATHS), *(["{good}", v] for v in BAD_PATHS),
        ["{good}", "{good}", "--baseline-run", "nope"], ["{good}", "{good}", "--new-run", "nope"],
        ["{good}", "{good}", "--baseline-run", ""], ["{good}", "{good}", "--baseline-run", "\x00"],
        ["{good}", "{good}"], ["{good}", "{good}", "--threshold", "nan"], ["{good}", "{good}", "--threshold", "inf"],
        ["{good}", "{good}", "--threshold", "x"], ["{good}", "{good}", "--by", "nope"],
        ["{good}", "{good}", "--format", "csv"], ["{good}", "{good}", "--table", "nope"], ["{good}"])]
    good_predict = ["predict", "{good}", "--params", "7B"]
    cases += [(f"predict --params={v!r}", ["predict", "{good}", f"--params={v}", "--dp", "8"])
              for v in BAD_FLOAT + ["0", "1Q", "B", "1e30B"]]
    for opt in PREDICT_INTS:
        cases += [(f"predict {opt}={v!r}", [*good_predict, f"{opt}={v}"]) for v in BAD_INT + ["0", "1e10"]]
    cases += [(f"predict --bucket-mb={v!r}", [*good_predict, "--dp", "8", f"--bucket-mb={v}"]) for v in BAD_FLOAT + ["0"]]
    cases += [(f"predict --bucket={v!r}", [*good_predict, "--dp", "8", f"--bucket={v}"]) for v in BAD_BYTES + ["2T"]]
    cases += [("predict --bucket and --bucket-mb", [*good_predict, "--dp", "8", "--bucket=1M", "--bucket-mb=1"]),
              ("predict two ranks per node", [*good_predict, "--ranks-per-node=2", "--gpus-per-node=4"])]
    cases += [(f"predict {a!r}", [*good_predict, *a]) for a in (
        ["--dtype", "nope"], ["--dp", "10000000000"], ["--tp", "3"], ["--pp", "64"], ["--pp", "3"], [],
        ["--format", "xml"])]
    cases += [(f"predict {a!r}", ["predict", *a]) for a in (["{good}"], ["--params", "1"])]
    cases += [(f"predict --trace {a!r}", ["predict", "{good}", *a]) for a in (
        ["--trace", "{bin}"], ["--trace", "\x00"], ["--trace", "/proc/collbench"], ["--trace", DUMPS, "--what-if", "dp=2"],
        ["--params", "7B", "--dp", "8", "--replay-run", "r"], ["--params", "7B", "--dp", "8", "--ops-per-step", "2"],
        ["--trace", DUMPS, "--ops-per-step", "0"], ["--trace", DUMPS, "--gpus-per-node", "0"],
        ["--trace", DUMPS, "--ranks-per-node", "0"])]
    cases += [(f"replay {a!r}", ["replay", *a]) for a in (
        [], ["{bin}"], ["\x00"], ["/proc/collbench"], ["{good}"], [DUMPS, "--repeat", "0"], [DUMPS, "--repeat", "x"],
        [DUMPS, "--repeat", "1e9"], [DUMPS, "--ops-per-step", "0"], [DUMPS, "--ops-per-step", "x"],
        [DUMPS, "--trace-ranks-per-node", "0"], [DUMPS, DUMPS], [DUMPS, "--backend", "nope"])]
    watch_options = ("--collectives", "--dtypes", "--min-bytes", "--max-bytes", "--patterns", "--group-timeout",
                     "--output", "--address", "--env", "--nodes", "--exclude", "--config")
    for opt in watch_options:
        cases += [(f"watch {opt}={v!r}", ["watch", f"{opt}={v}"]) for v in SPEC_OPTIONS.get(opt, BAD_TEXT)
                  if v not in ("", " ", "\t")]
    cases += [(f"watch {a!r}", ["watch", *a]) for a in (
        *(["--every", v] for v in ("", "0", "-5m", "5x", "nan", "inf", "1e9d", "\x00", "5 m")),
        *(["--cycles", v] for v in ("x", "-1", "1.5", "1e30", "9" * 40)), ["--baseline-cycles", "0"],
        *(["--retention", v] for v in ("5", "0d", "xd", "-1d", "nand", "1e9d", "12h")),
        *(["--reconnect-timeout", v] for v in ("0", "x", "-1s")), ["--threshold", "nan"], ["--threshold", "5"],
        ["--format", "csv"], ["--min-fraction", "0"], ["--expected", "{bin}"])]
    cases += [(f"doctor {a!r}", ["doctor", *a]) for a in (
        ["--format", "xml"], ["--ranks-per-node", "0"], ["--address", ""], ["--address", "host:99999"],
        ["--address", "http://h:8265"], ["--nodes", "a\x00b"], ["--exclude", "x" * 300],
        ["--nodes", "10.0.0.1", "--exclude", "10.0.0.1"], ["--config", "{bin}"], ["nope"])]
    cases += [(f"lab {a!r}", ["lab", *a]) for a in (
        [], ["nope"], *(["up", f"--nodes={v}"] for v in BAD_INT + ["0", "201", "100000000"]),
        *(["up", f"--{flag}={v}"] for flag in ("cpus-per-node", "ranks-per-node")
          for v in ("", "0", "-1", "x", "nan", "9" * 40)),
        ["up", "--cpus-per-node=2", "--ranks-per-node=3"],
        *(["up", f"--link={v}"] for v in ("", "x", "fast", "1e30gbit", "nan", "-1gbit", "\x00")),
        *(["up", f"--node-link={v}"] for v in ("1=fast", "", "=", "x=1gbit", "9=1gbit", "1=", "-1=1gbit", "1=\x00")),
        *(["up", f"--subnet={v}"] for v in ("", "x", "10.0.0.0/31", "::1/128", "\x00")),
        *(["up", f"--timeout={v}"] for v in ("", "x", "nan", "inf", "-1", "0", "1e30", "2h", "5 m", "5M")),
        *([verb, f"--name={v}"] for verb in ("up", "down", "exec") for v in (
            "", "Lab", "1lab", "toolong", "a/b", "../x", "\x00", "💥", "x" * 300)))]
    return cases


CASES = _cases()


# -- broken files ---------------------------------------------------------------------------
def _files(tmp) -> dict[str, str]:
    def write(name: str, data: bytes | str) -> str:
        path = os.path.join(tmp, name)
        with open(path, "wb") as f:
            f.write(data.encode() if isinstance(data, str) else data)
        return path

    good = os.path.join(tmp, "good")
    write_run(good, RUN, nodes=3)
    parquet = next(os.path.join(d, f) for d, _, fs in os.walk(good) for f in fs if f.endswith(".parquet"))
    with open(parquet, "rb") as f:
        head = f.read()
    os.makedirs(os.path.join(tmp, "dir"))
    manifests = {}
    for name, text in (("deep_manifest", "[" * 100_000), ("list_manifest", "[1, 2]"),
                       ("no_spec_manifest", json.dumps({"run_id": RUN, "state": "interrupted"}))):
        manifests[name] = os.path.join(tmp, name)
        write_run(manifests[name], RUN, nodes=2)
        write(os.path.join(name, "_runs", f"{RUN}.json"), text)
    foreign = os.path.join(tmp, "only_foreign")
    os.makedirs(foreign)
    pq.write_table(pa.table({"run_id": [1, 2], "x": ["a", "b"]}), os.path.join(foreign, "theirs.parquet"))
    newer = os.path.join(tmp, "newer")
    os.makedirs(newer)
    pq.write_table(pa.table({"schema_version": [99], "run_id": ["r"], "started_at": [1.0]}),
                   os.path.join(newer, "x.parquet"))
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
    entry = {"collective": "all_reduce", "topology": "inter", "min_bytes": "1M", "busbw_gbps": 10}

    def exp(**change) -> str:
        return json.dumps([{**entry, **change}])  # JSON is YAML

    return {
        "tmp": tmp, "good": good, "dir": os.path.join(tmp, "dir"), "missing": os.path.join(tmp, "missing"),
        "bin": write("bin", bytes(range(256)) * 64), "empty": write("empty", b""), "nul": write("nul", b"a: \x00\n"),
        "bad_utf8": write("bad_utf8", b"iters: \xff\xfe\n"),
        "truncated": write("truncated.parquet", head[: len(head) // 2]),
        "garbage_parquet": write("garbage.parquet", b"PAR1" + b"\x00" * 100 + b"PAR1"),
        "only_foreign": foreign, "newer": newer,
        "bomb": write("bomb.yaml", bomb + "collectives: *i\n"), "deep": write("deep.yaml", "[" * 10_000),
        "yaml_list": write("list.yaml", "- 1\n- 2\n"), "yaml_scalar": write("scalar.yaml", "42\n"),
        "yaml_broken": write("broken.yaml", "a: [\n"),
        "cfg_nan": write("nan.yaml", "group_timeout: .nan\n"), "cfg_inf": write("inf.yaml", "deadline_rate: .inf\n"),
        "cfg_huge": write("huge.yaml", "iters: 1000000000000000000000000000000\n"),
        "cfg_env_list": write("env.yaml", "env: [1, 2]\n"), "cfg_nested": write("nested.yaml", "dtypes: [[a, b]]\n"),
        "cfg_unknown": write("unknown.yaml", "max_byte: 1K\n"), "cfg_flops_nan": write("flops.yaml", "compute_flops: .nan\n"),
        "cfg_iters_huge": write("iters.yaml", "iters: 1.0e+30\n"), "cfg_python": write("py.yaml", "a: !!python/object:os.system x\n"),
        "cfg_keys": write("keys.yaml", "1: 2\n"), "cfg_output_int": write("outint.yaml", "output: 5\n"),
        "exp_inf": write("exp_inf.yaml", "- {collective: all_reduce, topology: inter, busbw_gbps: .inf}\n"),
        "exp_nan": write("exp_nan.yaml", "- {collective: all_reduce, topology: inter, busbw_gbps: .nan}\n"),
        "exp_coll": write("exp_coll.yaml", exp(collective="all_reduse")),
        "exp_keys": write("exp_keys.yaml", "- {topology: inter, busbw_gbps: 1, 1: 2, [a]: b}\n"),
        "exp_topology": write("exp_topo.yaml", exp(topology="ring")),
        "exp_min_world_inf": write("exp_world.yaml", "- {topology: inter, busbw_gbps: 1, min_world: .inf}\n"),
        "exp_min_bytes": write("exp_bytes.yaml", exp(min_bytes=[1])), "exp_neg": write("exp_neg.yaml", exp(busbw_gbps=-1)),
        "exp_str": write("exp_str.yaml", exp(busbw_gbps="fast")), "exp_scalars": write("exp_sc.yaml", "[1, 2]\n"),
        "exp_platform": write("exp_plat.yaml", exp(platform=["a"])), **manifests,
    }


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(str(tmp_path_factory.mktemp("hostile")))


@pytest.fixture(autouse=True)
def no_ray(offline_cli):
    """Every case in this process with Ray and the lab out of reach (tests/offline.py)."""


def _snapshot(root: str) -> list[tuple[str, int]]:
    return sorted((os.path.join(d, n), os.stat(os.path.join(d, n)).st_mtime_ns)
                  for d, dirs, names in os.walk(root) for n in dirs + names)


def test_there_are_at_least_250_kinds_of_hostile_input():
    assert len(CASES) >= 250
    assert len({c[0] for c in CASES}) == len(CASES)


def test_every_hostile_input_exits_2_in_one_line(files, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative --output and --csv-dir values land here, and must not
    before = _snapshot(files["tmp"])
    t0 = time.monotonic()
    failures = []
    for name, argv in CASES:
        argv = [_fill(a, files) for a in argv]
        if argv[0] in ("run", "qualify", "watch") and not any(a.startswith("--output") for a in argv):
            argv.append(f"--output={tmp_path}/out")
        try:
            code, out, err = call(argv)
        except Tripwire as e:
            failures.append(f"{name}: {e}")
            continue
        except BaseException as e:  # noqa: BLE001 - every escape is a failure of the contract
            failures.append(f"{name}: raised {type(e).__name__}: {str(e)[:200]}")
            continue
        lines = err.strip().splitlines()
        if code != 2 or len(lines) != 1 or not lines[0].startswith("collbench: error: ") or out:
            failures.append(f"{name}: exit {code}, stdout {out[:80]!r}, stderr {err[:300]!r}")
        elif os.listdir(tmp_path):
            failures.append(f"{name}: wrote {os.listdir(tmp_path)}")
            for entry in os.listdir(tmp_path):
                os.system(f"rm -rf '{tmp_path}/{entry}'")
    print(f"{len(CASES)} hostile inputs in {time.monotonic() - t0:.1f}s")
    assert _snapshot(files["tmp"]) == before, "a case changed the fixture files"
    assert not failures, f"{len(failures)} of {len(CASES)} break the contract:\n" + "\n".join(failures)


def _fill(arg: str, files: dict[str, str]) -> str:
    for key, path in files.items():
        arg = arg.replace("{" + key + "}", path)
    return arg
