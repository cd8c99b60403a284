"""Generator determinism and realism, and the packaged traces it produced."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # no conftest or install is assumed
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from specs import load_spec, spec_path  # noqa: E402
from traces import (  # noqa: E402
    MODELS,
    TraceError,
    available_traces,
    default_trace_path,
    generate,
    read_trace,
    validate,
    write_trace,
)

# the arguments the packaged traces were made with (see traces/data/README.md)
DEFAULT_ARGS = dict(max_gpus=8, mean_interarrival=180.0, median_duration=900.0,
                    duration_sigma=1.6, min_duration=120.0, max_duration=14400.0)


def test_same_seed_same_trace_other_seed_other_trace():
    assert generate(200, 3) == generate(200, 3)
    assert generate(200, 3) != generate(200, 4)


def test_generated_records_validate_clean_and_round_trip(tmp_path):
    jobs = generate(300, 11)
    assert validate(jobs, spec=load_spec(spec_path("n8g8"))) == []
    path = tmp_path / "g.csv"
    write_trace(path, jobs)
    assert read_trace(path) == jobs


def test_shape_is_philly_like():
    jobs = generate(2000, 5)
    assert [j.job_id for j in jobs] == list(range(2000))
    submits = [j.submit_time for j in jobs]
    assert submits == sorted(submits) and submits[0] == 0.0
    assert sum(submits[1:]) > 0
    gpus = Counter(j.num_gpu for j in jobs)
    assert set(gpus) <= {1, 2, 4, 8, 16, 32}
    assert 0.33 < gpus[1] / 2000 < 0.47 and 0.24 < gpus[8] / 2000 < 0.36
    assert Counter(j.model_name for j in jobs).keys() == MODELS.keys()
    durations = sorted(j.duration for j in jobs)
    assert durations[0] < 600 and durations[-1] > 86400  # minutes to days
    assert {j.priority for j in jobs} == {0, 1}
    for j in jobs:
        assert len(j.stage_times) == 3
        assert j.duration == pytest.approx(j.iterations * j.iteration_time)
        assert j.batch_size == MODELS[j.model_name].batch_size
        if j.num_gpu == 1:
            assert j.stage_times[2] == 0.0
        profile = MODELS[j.model_name].stage_times
        assert j.stage_times[1] == pytest.approx(profile[1], rel=0.3, abs=2e-4)


def test_max_gpus_backlog_and_uniform_arrivals():
    small = generate(300, 2, max_gpus=6)
    assert {j.num_gpu for j in small} <= {1, 2, 4}
    assert {j.submit_time for j in generate(50, 2, backlog=True)} == {0.0}
    even = generate(5, 2, arrival="uniform", mean_interarrival=10.0)
    assert [j.submit_time for j in even] == [0.0, 10.0, 20.0, 30.0, 40.0]
    assert generate(0, 1) == []


@pytest.mark.parametrize(
    "kwargs",
    [dict(max_gpus=0), dict(arrival="bursty"), dict(mean_interarrival=-1.0),
     dict(min_duration=10.0, max_duration=5.0)],
)
def test_bad_arguments_raise(kwargs):
    with pytest.raises(ValueError):
        generate(10, 1, **kwargs)


def test_packaged_traces_are_the_generator_output():
    assert set(available_traces()) >= {"default", "philly_1k"}
    default = read_trace(default_trace_path(), load_spec(spec_path("n2g8")))
    assert default == generate(40, 1, **DEFAULT_ARGS)
    assert max(j.num_gpu for j in default) <= 8
    assert 3600 <= default[-1].submit_time <= 3 * 3600
    philly = read_trace(default_trace_path("philly_1k"), load_spec(spec_path("n8g8")))
    assert philly == generate(1000, 7)
    assert default_trace_path("default") == default_trace_path()


def test_unknown_packaged_trace():
    with pytest.raises(TraceError, match="no packaged trace"):
        default_trace_path("nope")
