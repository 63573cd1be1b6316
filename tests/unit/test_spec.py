import pytest

from orchestrator.errors import RenamedOption, UsageError
from orchestrator.sweep.spec import SweepSpec, from_mapping, key_of, spec_fields


def test_defaults_are_valid_and_sweep_sizes():
    spec = SweepSpec()
    assert spec.sizes()[0] == 16 and spec.sizes()[-1] == 16 << 20
    assert "all_reduce" in spec.collectives and "send_recv" in spec.collectives


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"min_bytes": 1024, "max_bytes": 8}, "--min-bytes 1024 is larger than --max-bytes 8"),
        ({"collectives": ("all_reduce", "allreduce")}, "--collectives: unknown value 'allreduce'"),
        ({"collectives": ()}, "--collectives: empty list"),
        ({"min_bytes": 0}, "--min-bytes 0: must be at least 1"),
        ({"iters": -1}, "--iters -1: must be at least 1"),
        ({"warmup": -3}, "--warmup -3: must be at least 0"),
        ({"backend": "gloo", "dtypes": ("float8_e4m3",)}, "float8_e4m3 is not supported by backend gloo"),
        ({"backend": "mpi"}, "--backend: unknown value 'mpi'"),
        ({"patterns": ("ring",)}, "--patterns: unknown pattern 'ring'"),
        ({"patterns": ("kbatch:1",)}, "--patterns: unknown pattern 'kbatch:1'"),
        ({"env": ("PATH=/tmp",)}, "--env PATH: only communication variables"),
        ({"env": ("NCCL_ALGO",)}, "--env 'NCCL_ALGO': expected NAME=VALUE"),
        ({"group_timeout_s": 0.0}, "--group-timeout 0.0: must be a positive number"),
        ({"group_timeout_s": float("nan")}, "--group-timeout nan: must be a positive number"),
        ({"deadline_rate_gbps": float("inf")}, "--deadline-rate inf: must be a positive number"),
        ({"step_factor": 1}, "--step-factor 1: must be at least 2"),
    ],
)
def test_bad_values_name_the_field_and_value(kwargs, message):
    with pytest.raises(UsageError) as e:
        SweepSpec(**kwargs)
    assert message in str(e.value)
    assert "\n" not in str(e.value)


def test_config_mapping_converts_and_refuses():
    assert from_mapping({"min_bytes": "1K", "dtypes": ["float32", "int8"], "concurrent": False}) == {
        "min_bytes": 1024,
        "dtypes": ("float32", "int8"),
        "concurrent": False,
    }
    with pytest.raises(UsageError, match="unknown key 'max_byte'"):
        from_mapping({"max_byte": 8})
    with pytest.raises(UsageError, match="--iters 'many': expected an integer"):
        from_mapping({"iters": "many"})
    with pytest.raises(UsageError, match="--concurrent 'yes': expected true or false"):
        from_mapping({"concurrent": "yes"})


def test_a_key_is_its_long_flags_name_and_the_old_keys_still_work_with_a_note():
    keys = {f.name: key_of(f) for f in spec_fields()}
    assert {name: key for name, key in keys.items() if name != key} == {
        "ops": "op", "check_iters": "check", "group_timeout_s": "group_timeout", "deadline_rate_gbps": "deadline_rate"}
    assert from_mapping({"group_timeout": "5m", "op": "max", "check": 0, "deadline_rate": 2}) == {
        "group_timeout_s": 300.0, "ops": ("max",), "check_iters": 0, "deadline_rate_gbps": 2.0}
    with pytest.warns(RenamedOption, match="^f.yaml: key group_timeout_s is now group_timeout; it goes in the next "
                      "release$"):
        assert from_mapping({"group_timeout_s": 90}, source="f.yaml") == {"group_timeout_s": 90.0}
    with pytest.raises(UsageError, match="keys 'group_timeout' and 'group_timeout_s' are one option"):
        from_mapping({"group_timeout": 1, "group_timeout_s": 2})


def test_a_key_the_command_does_not_take_is_refused_naming_it_and_the_command():
    with pytest.raises(UsageError) as e:
        from_mapping({"iters": 3, "patterns": "inter"}, source="--config q.yaml", only=("iters", "output"),
                     command="collbench qualify")
    assert str(e.value) == "--config q.yaml: key 'patterns' is not an option of collbench qualify (its keys: " \
        "iters, output)"


def test_durations_take_units_and_a_bare_number_is_seconds():
    for given, seconds in (("30s", 30), ("5m", 300), ("1h", 3600), ("2d", 172800), ("90", 90), (45, 45),
                           (" 1.5 ", 1.5), ("1e3", 1000)):
        assert from_mapping({"group_timeout": given}) == {"group_timeout_s": seconds}
    for bad, said in (("5M", "expected a duration such as 30s"), ("5 m", "expected a duration"),
                      ("-1", "expected a duration"), ("0", "must be a positive duration"),
                      (True, "expected a duration"), (".nan", "expected a duration"), ("8d", "must be at most 7d")):
        with pytest.raises(UsageError, match=f"^--group-timeout {bad!r}: {said}"):
            from_mapping({"group_timeout": bad})


def test_env_passes_communication_variables():
    assert SweepSpec(env=("NCCL_ALGO=Ring", "GLOO_SOCKET_IFNAME=eth1")).env_vars() == {
        "NCCL_ALGO": "Ring",
        "GLOO_SOCKET_IFNAME": "eth1",
    }


def test_nccl_tests_spellings_and_all():
    from orchestrator.sweep.spec import for_backend

    spec = SweepSpec(**from_mapping({"dtypes": "float,half,bf16,double,int,char,float32", "op": "all"}))
    assert spec.dtypes == ("float32", "float16", "bfloat16", "float64", "int32", "int8")  # canonical, once each
    assert spec.ops == ("sum", "max", "min", "prod")
    every = SweepSpec(**from_mapping({"dtypes": "all"}))
    assert for_backend(every, "gloo").dtypes == ("float32", "float16", "bfloat16", "float64", "int32", "int8")
    assert for_backend(every, "nccl").dtypes[-2:] == ("float8_e4m3", "float8_e5m2")
    assert SweepSpec(**from_mapping({"dtypes": "f8e4m3"})).dtypes == ("float8_e4m3",)
    # --collectives all: every collective the registry declares (all_to_allv too), not overlap
    from workloads.registry import COLLECTIVES

    assert SweepSpec(**from_mapping({"collectives": "all"})).collectives == COLLECTIVES
    assert "all_to_allv" in COLLECTIVES and "overlap" not in COLLECTIVES
    assert SweepSpec(**from_mapping({"collectives": "overlap,all"})).collectives == ("overlap", *COLLECTIVES)
    with pytest.raises(UsageError, match="float8_e4m3 is not supported by backend gloo"):
        for_backend(SweepSpec(dtypes=("float8_e4m3",)), "gloo")


def test_yaml_env_mapping():
    spec = SweepSpec(**from_mapping({"env": {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": 4}}))
    assert spec.env_vars() == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}
    with pytest.raises(UsageError, match="--env NCCL_IB_DISABLE: True is not a string or number"):
        from_mapping({"env": {"NCCL_IB_DISABLE": True}})
    with pytest.raises(UsageError, match="--env LD_PRELOAD: only communication variables"):
        SweepSpec(**from_mapping({"env": {"LD_PRELOAD": "/x.so"}}))
