"""`interlace-trace import`: each format's hand-written sample imports with the counts its rows
call for (written out below by reading the samples, not by running the importer), the
result is a trace interlace-sim runs, and the window options cut what they say."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402

from scheduler.sim.cli import main as sim_main  # noqa: E402
from traces import read_trace  # noqa: E402
from traces.cli import main  # noqa: E402
from traces.models import MODELS  # noqa: E402

DATA = ROOT / "tests" / "data" / "imports"
SAMPLES = {
    "philly": DATA / "philly_cluster_job_log",
    "helios": DATA / "helios_cluster_log.csv",
    "pai": DATA / "pai",
    "openb": DATA / "openb_pod_list_sample.csv",
}
# What each sample's rows call for under the defaults (spec n2g8: 16 GPUs), row by row:
EXPECTED = {
    # 10001 two attempts; 10002 no attempts; 10003 a None attempt + a timed one; 10004 end
    # "None"; 10005 no GPU ids; 10006 ends before it starts; 10001 again; 10008 submitted
    # null; 10009 32 GPUs; "oops"; 10011 attempts an object; 10012 ok.
    "philly": dict(read=12, kept=3, dropped=dict(missing_times=3, cpu_only=1, malformed=2,
                                                 negative_duration=1, duplicate=1,
                                                 too_many_gpus=1),
                   adjusted=dict(attempts_skipped=1, failed_or_killed_kept=1)),
    # h1 ok; h2 failed; h3 0 GPUs; h4 no submit; h5 no end, no duration; h6 -30 s; h1 again;
    # h8 64 GPUs; h9 gpu_num abc; h10 short row; h11 0 s; h12 cancelled; h13 no duration
    # column value (end-start); h14 ok.
    "helios": dict(read=14, kept=5, dropped=dict(cpu_only=1, missing_times=2,
                                                 negative_duration=1, duplicate=1,
                                                 too_many_gpus=1, malformed=2, zero_duration=1),
                   adjusted=dict(failed_or_killed_kept=2)),
    # j01 ok; j02 0.5 GPU; j03 0.75 GPU failed; j04 running; j05 CPU task only; j06 no task;
    # j07 32 GPUs; j08 start 'yesterday'; j09 task plan_gpu abc; j01 again; j11 ps+4 workers;
    # j12 short row.
    "pai": dict(read=12, kept=4, dropped=dict(missing_times=1, cpu_only=1, no_tasks=1,
                                              too_many_gpus=1, malformed=3, duplicate=1),
                adjusted=dict(fractional_gpus_ceiled=2, failed_or_killed_kept=1)),
    # 0001 ok; 0002 half a GPU, BE; 0003 0 GPUs; 0004 failed; 0005 pending; 0006 deleted
    # before scheduled; 0001 again; 0008 num_gpu x; 0009 running.
    "openb": dict(read=9, kept=4, dropped=dict(cpu_only=1, missing_times=1, negative_duration=1,
                                               duplicate=1, malformed=1),
                  adjusted=dict(fractional_gpus_ceiled=1, failed_or_killed_kept=1)),
}
KEPT_IDS = {
    "philly": ["application_1506638472019_10001", "application_1506638472019_10003",
               "application_1506638472019_10012"],
    "helios": ["h1", "h2", "h12", "h13", "h14"],
    "pai": ["j01", "j02", "j03", "j11"],
    "openb": ["openb-pod-0001", "openb-pod-0002", "openb-pod-0004", "openb-pod-0009"],
}


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "internal error" not in err
    return code, out, err


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def do_import(capsys, tmp_path, fmt: str, *extra: str) -> tuple[Path, dict]:
    out = tmp_path / f"{fmt}.csv"
    code, stdout, err = run(capsys, "import", fmt, SAMPLES[fmt], "--out", out, *extra)
    assert code == 0, err
    summary = json.loads((tmp_path / f"{fmt}.csv.summary.json").read_text())
    assert f"wrote {summary['kept']} jobs" in stdout
    assert f"rows read{summary['rows_read']:>31}" in err  # the table on stderr
    return out, summary


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_sample_counts_match_its_rows(capsys, tmp_path, fmt):
    out, summary = do_import(capsys, tmp_path, fmt)
    want = EXPECTED[fmt]
    assert summary["rows_read"] == want["read"]
    assert summary["kept"] == want["kept"]
    assert {k: v for k, v in summary["dropped"].items() if v} == want["dropped"]
    assert {k: v for k, v in summary["adjusted"].items() if v} == want["adjusted"]
    assert want["read"] == want["kept"] + sum(want["dropped"].values())
    written = rows(out)
    assert [r["source_id"] for r in written] == KEPT_IDS[fmt]
    records = read_trace(out)
    assert [r.job_id for r in records] == list(range(len(written)))
    assert records[0].submit_time == 0
    assert all(a.submit_time <= b.submit_time for a, b in zip(records, records[1:]))
    for record in records:
        assert record.model_name in MODELS
        assert record.duration == pytest.approx(record.iterations * record.iteration_time)


def test_philly_job_values(capsys, tmp_path):
    out, _ = do_import(capsys, tmp_path, "philly")
    records, extra = read_trace(out), rows(out)
    # 10001: attempts of 1 h (8 GPUs over two machines) and 30 min (8 GPUs); submitted 07:00
    assert records[0].num_gpu == 8
    assert abs(records[0].duration - 5400) <= records[0].iteration_time / 2
    # 10003: one attempt of 20 min counted, the None one left out; submitted 10 min later
    assert (records[1].num_gpu, records[1].submit_time) == (2, 600)
    assert abs(records[1].duration - 1200) <= records[1].iteration_time / 2
    assert (extra[1]["user"], extra[1]["tenant"], extra[1]["status"]) == ("ee4a1c", "b436b2",
                                                                         "failed")
    # 10012: 1 GPU, so no all-reduce
    assert records[2].num_gpu == 1 and records[2].stage_times[2] == 0
    assert [r.interval for r in records] == [0, 600, 3900]


def test_pai_gpus_and_workload(capsys, tmp_path):
    out, _ = do_import(capsys, tmp_path, "pai", "--models", "workload")
    records, extra = read_trace(out), rows(out)
    assert [r.num_gpu for r in records] == [2, 1, 1, 4]  # 2x100%, 50% and 3x25% ceiled, 4x100%
    assert [e["workload"] for e in extra] == ["ResNet50", "", "", "bert"]
    # PAI names no team: the job's user is its tenant
    assert [(e["user"], e["tenant"]) for e in extra] == [
        ("user_a", "user_a"), ("user_b", "user_b"), ("user_a", "user_a"), ("user_f", "user_f")]
    assert records[0].model_name == "resnet18" and records[3].model_name == "bert"
    # j11: tasks from 1583001000 to 1583011000
    assert abs(records[3].duration - 10000) <= records[3].iteration_time / 2


def test_openb_best_effort_is_opportunistic(capsys, tmp_path):
    out, _ = do_import(capsys, tmp_path, "openb")
    assert [r.priority for r in read_trace(out)] == [0, 1, 0, 0]


def test_pai_takes_explicit_tables(capsys, tmp_path):
    out = tmp_path / "p.csv"
    code, _, err = run(capsys, "import", "pai", DATA / "pai" / "pai_job_table.csv",
                       "--tasks", DATA / "pai" / "pai_task_table.csv", "--out", out)
    assert code == 0, err
    assert [r["source_id"] for r in rows(out)] == KEPT_IDS["pai"]
    code, _, err = run(capsys, "import", "pai", DATA / "pai" / "pai_job_table.csv", "--out", out)
    assert code == 2 and "--tasks" in err and len(err.strip().splitlines()) == 1


def test_tenants_top_keeps_the_heaviest_users(capsys, tmp_path):
    """GPU-hours of the kept PAI jobs (ceiled GPUs x run time): user_f 4 x 10000 s = 11.1 h,
    user_a 2 x 7190 s + 1 x 600 s = 4.16 h, user_b 1 x 3600 s = 1 h."""
    out, summary = do_import(capsys, tmp_path, "pai", "--tenants-top", "2")
    assert [r["tenant"] for r in rows(out)] == ["user_a", "others", "user_a", "user_f"]
    assert [r["user"] for r in rows(out)] == ["user_a", "user_b", "user_a", "user_f"]
    assert summary["tenants"] == {"user_f": {"jobs": 1, "gpu_hours": 11.111},
                                  "user_a": {"jobs": 2, "gpu_hours": 4.161},
                                  "others": {"jobs": 1, "gpu_hours": 1.0}}
    # ranked on the jobs written: within the first two, user_a outweighs user_b
    out, _ = do_import(capsys, tmp_path, "pai", "--limit", "2", "--tenants-top", "1")
    assert [r["tenant"] for r in rows(out)] == ["user_a", "others"]
    out, _ = do_import(capsys, tmp_path, "pai", "--tenant", "user_a")
    assert [r["source_id"] for r in rows(out)] == ["j01", "j03"]


def test_folded_trace_runs_with_a_small_tenants_file(capsys, tmp_path):
    """The point of --tenants-top: a file of the top users and `others` covers the trace."""
    tenants = tmp_path / "t.toml"
    tenants.write_text('[tenants.user_f]\nquota = 8\n[tenants.user_a]\nquota = 4\n'
                       '[tenants.others]\nquota = 4\n')
    out, _ = do_import(capsys, tmp_path, "pai")
    assert sim_main(["--trace", str(out), "--tenants", str(tenants), "--policy", "fifo"]) != 0
    assert "tenant 'user_b' is not in the tenants file" in capsys.readouterr().err
    out, _ = do_import(capsys, tmp_path, "pai", "--tenants-top", "2")
    assert sim_main(["--trace", str(out), "--tenants", str(tenants), "--policy", "fifo",
                     "--json"]) == 0
    result = json.loads(capsys.readouterr().out.splitlines()[0])
    jobs = {name: t["jobs"] for name, t in result["tenants"]["by_tenant"].items()}
    assert jobs == {"user_f": 1, "user_a": 2, "others": 1}


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_imported_trace_simulates(capsys, tmp_path, fmt):
    out, summary = do_import(capsys, tmp_path, fmt)
    assert sim_main(["--trace", str(out), "--policy", "muri-s,srsf", "--json"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines() if x.startswith("{")]
    assert [(x["policy"], x["jobs"]) for x in lines] == [("muri-s", summary["kept"]),
                                                        ("srsf", summary["kept"])]


def test_spec_decides_what_is_too_big(capsys, tmp_path):
    _, small = do_import(capsys, tmp_path, "philly", "--spec", "n3g4")  # 12 GPUs
    _, big = do_import(capsys, tmp_path, "philly", "--spec", "n64g8")  # 512 GPUs
    assert small["dropped"]["too_many_gpus"] == 1 and small["kept"] == 3
    assert big["dropped"]["too_many_gpus"] == 0 and big["kept"] == 4


def test_window_and_limit_and_tenant(capsys, tmp_path):
    def kept(*extra: str) -> tuple[list[str], dict]:
        out, summary = do_import(capsys, tmp_path, "helios", *extra)
        return [r["source_id"] for r in rows(out)], summary

    # submits (kept rows): h1 08:00, h2 08:05, h12 08:40, h13 08:45, h14 09:00
    ids, summary = kept("--since", "2020-03-01 08:05:00", "--until", "2020-03-01 08:45:00")
    assert ids == ["h2", "h12"] and summary["dropped"]["out_of_window"] == 3
    ids, _ = kept("--since", "+5m", "--until", "+45m")  # the log's first submit is 08:00
    assert ids == ["h2", "h12"]
    ids, summary = kept("--limit", "2")
    assert ids == ["h1", "h2"] and summary["dropped"]["beyond_limit"] == 3
    ids, summary = kept("--tenant", "vcB")
    assert ids == ["h14"] and summary["dropped"]["other_tenant"] > 0
    assert summary["rows_read"] == summary["kept"] + sum(summary["dropped"].values())
    ids, summary = kept("--drop-failed")
    assert ids == ["h1", "h13", "h14"] and summary["dropped"]["failed_or_killed"] == 2
    _, summary = do_import(capsys, tmp_path, "pai", "--fractional", "drop")
    assert summary["dropped"]["fractional_gpus"] == 2 and summary["kept"] == 2


def test_models_are_seeded_per_job(capsys, tmp_path):
    def models(*extra: str) -> dict[str, str]:
        out, _ = do_import(capsys, tmp_path, "helios", *extra)
        return {r["source_id"]: r["model_name"] for r in rows(out)}

    full = models("--seed", "3")
    assert models("--seed", "3") == full
    window = models("--seed", "3", "--since", "+30m")
    assert window and all(full[k] == v for k, v in window.items())  # a job keeps its model
    assert set(models("--models", "gpt2").values()) == {"gpt2"}
    seen = set()
    for seed in range(12):
        seen |= set(models("--seed", str(seed), "--models", "mix:vgg16=1,dqn=1").values())
    assert seen == {"vgg16", "dqn"}


@pytest.mark.parametrize("argv, needle", [
    (["--models", "nosuch"], "--models"),
    (["--models", "mix:vgg16=0"], "positive weight"),
    (["--since", "yesterday"], "--since"),
    (["--spec", "n99g9"], "n99g9"),
    (["--tenants-top", "0"], "--tenants-top"),
    (["--tenants-top", "all"], "--tenants-top"),
])
def test_bad_options_one_line(capsys, tmp_path, argv, needle):
    code, _, err = run(capsys, "import", "helios", SAMPLES["helios"], "--out",
                       tmp_path / "x.csv", *argv)
    assert code in (1, 2) and needle in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.csv").exists()


def test_unreadable_inputs_name_file_and_line(capsys, tmp_path):
    missing = tmp_path / "nope.json"
    code, _, err = run(capsys, "import", "philly", missing, "--out", tmp_path / "o.csv")
    assert code == 1 and f"{missing}: no such file" in err
    broken = tmp_path / "log.json"
    broken.write_text('[\n{"jobid": "a"},\n{"jobid": }\n')
    code, _, err = run(capsys, "import", "philly", broken, "--out", tmp_path / "o.csv")
    assert code == 1 and err.startswith(f"{broken}:3: malformed JSON")
    latin = tmp_path / "log.csv"
    latin.write_bytes(b"job_id,gpu_num,submit_time,start_time,end_time\nh\xe9,1,1,1,2\n")
    code, _, err = run(capsys, "import", "helios", latin, "--out", tmp_path / "o.csv")
    assert code == 1 and f"{latin}:2: not UTF-8" in err
    assert not (tmp_path / "o.csv").exists()


def _decimal_ms(seconds: float) -> str:
    """The general rule of the Muri writer, spelled out with Decimal for the comparison."""
    from decimal import Decimal

    number = Decimal(repr(float(seconds))).scaleb(3)
    return format(number, "f") if -20 <= number.adjusted() <= 20 else str(number)


def test_fast_millisecond_text_is_the_general_text():
    """The writer's quick path for whole and tenth milliseconds (every imported time) gives
    exactly the text of the Decimal rule, so read_trace(write_trace(x)) == x still holds."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from traces.muri_csv import _format_ms

    values = st.one_of(
        st.integers(0, 10**12).map(lambda ms: round(ms / 1000, 3)),
        st.integers(0, 10**10).map(lambda t: round(t / 10000, 4)),
        st.floats(min_value=-1e10, max_value=1e10, allow_nan=False),
        st.sampled_from([0.0, -0.0, 0.0775, 1e9, 999999999.9999, 5e-324, 0.1 + 0.2]),
        st.integers(-10**12, 10**12),  # a record may hold whole seconds as int
    )

    @settings(max_examples=3000, deadline=None)
    @given(values)
    def same(seconds):
        assert _format_ms(seconds) == _decimal_ms(seconds)

    same()


def test_progress_bar_only_when_asked_off_a_terminal(capsys, tmp_path):
    _, _, quiet = run(capsys, "import", "helios", SAMPLES["helios"], "--out", tmp_path / "a.csv")
    _, _, loud = run(capsys, "import", "helios", SAMPLES["helios"], "--out", tmp_path / "b.csv",
                     "--progress")
    assert "reading [" not in quiet and "\r" not in quiet
    assert "reading [" in loud and "writing [" in loud
    assert (tmp_path / "a.csv").read_text() == (tmp_path / "b.csv").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "a.csv", "a.csv.summary.json", "b.csv", "b.csv.summary.json"]  # no .part left


def test_bench_import_runs_small():
    """The benchmark end to end on a small log, so it cannot rot: its generated odd rows are
    counted as such, its window equals the full import's first rows, and it simulates. In a
    process of its own, as it is run: a child's peak RSS counts its parent's at the fork, and
    this test process (torch loaded) is too big for the benchmark's 500 MB bound."""
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "bench_import.py"), "--rows",
                           "3000", "--sim-jobs", "100", "--policies", "srsf"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    steps = [json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")]
    odd = steps[0]["odd_rows"]
    full = steps[1]
    assert full["rows_read"] == 3000
    assert full["dropped"].get("missing_times", 0) == odd["no_end"]
    assert full["dropped"].get("negative_duration", 0) == odd["negative"]
    assert full["dropped"].get("malformed", 0) == odd["unreadable"]
    assert full["dropped"].get("cpu_only", 0) == odd["cpu"]
    assert steps[2]["same_as_full_prefix"] and steps[2]["kept"] == 100
    assert [(s["policy"], s["jobs"]) for s in steps[3:]] == [("srsf", 100)]


def test_nothing_kept_is_said(capsys, tmp_path):
    out = tmp_path / "o.csv"
    code, stdout, err = run(capsys, "import", "openb", SAMPLES["openb"], "--out", out,
                            "--tenant", "vcA")  # openb names no tenant
    assert code == 0 and "wrote 0 jobs" in stdout and "warning: no job kept" in err
    summary = json.loads((tmp_path / "o.csv.summary.json").read_text())
    # the 4 kept by default and the repeated 0001: the tenant rule comes before duplicates
    assert summary["dropped"]["other_tenant"] == 5 and summary["kept"] == 0


def test_examples_locate_rows(capsys, tmp_path):
    _, summary = do_import(capsys, tmp_path, "helios", "--limit", "4")
    src = SAMPLES["helios"]
    assert summary["examples"]["duplicate"] == [f"{src}:8: job h1 again"]
    assert summary["examples"]["too_many_gpus"] == [f"{src}:9: job h8: 64 GPUs > 16"]
    assert summary["examples"]["beyond_limit"] == [f"{src}:15: job h14"]
