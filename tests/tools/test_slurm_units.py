"""The Slurm launcher's pure parts, fed with environments and options as Slurm and an
operator give them: reading the allocation, the agents' step command lines, sbatch's."""
from __future__ import annotations

from pathlib import Path

import pytest

from scheduler.tools.slurm import steps
from scheduler.tools.slurm.allocation import (Allocation, AllocationError, from_env, gpu_count,
                                              gpu_ids, per_node_counts)
from scheduler.tools.slurm.cli import parse
from scheduler.tools.slurm.submit import Request, sbatch_argv
from specs import load_spec

JOB = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-03]",
       "SLURM_JOB_CPUS_PER_NODE": "64(x2),48", "SLURM_MEM_PER_NODE": "515000"}


def _expand(nodelist: str) -> list[str]:
    assert nodelist == "gpu[01-03]"
    return ["gpu01", "gpu02", "gpu03"]


@pytest.mark.parametrize("value, counts", [("8", [8]), ("8(x3)", [8, 8, 8]),
                                           ("64(x2),48", [64, 64, 48]), ("", [])])
def test_per_node_lists_expand(value, counts):
    assert per_node_counts(value) == counts


def test_a_bad_per_node_list_is_refused():
    with pytest.raises(AllocationError):
        per_node_counts("8(y2)")


@pytest.mark.parametrize("env, count", [
    ({"SLURM_GPUS_ON_NODE": "8", "SLURM_GPUS_PER_NODE": "a100:4"}, 8),
    ({"SLURM_JOB_GPUS": "0,1,2", "SLURM_GPUS_PER_NODE": "4"}, 3),
    ({"SLURM_GPUS_PER_NODE": "a100:4"}, 4),
    ({"SLURM_GPUS_PER_NODE": "2"}, 2),
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, 2),
    ({}, None),
])
def test_gpus_are_read_from_slurms_variables_in_order(env, count):
    assert gpu_count(env) == count


def test_an_agent_offers_the_gpus_slurm_made_visible_else_logical_ids():
    assert gpu_ids({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4) == [4, 5, 6, 7]
    assert gpu_ids({}, 3) == [0, 1, 2]
    assert gpu_ids({"CUDA_VISIBLE_DEVICES": "GPU-uuid-a"}, 1) == [0]


def test_the_spec_is_the_allocation_with_per_node_minimums(tmp_path):
    alloc = from_env(dict(JOB, SLURM_GPUS_ON_NODE="8", SLURM_RESTART_COUNT="2"),
                     expand=_expand)
    assert alloc.nodes == ("gpu01", "gpu02", "gpu03") and alloc.restarts == 2
    assert (alloc.gpus_per_node, alloc.cpus_per_node, alloc.mem_gb) == (8, 48, 502)
    path = tmp_path / "spec.csv"
    path.write_text(alloc.spec_csv())
    spec = load_spec(path)  # the scheduler's own reader accepts it
    assert (spec.num_nodes, spec.gpus_per_node, spec.cpus_per_node) == (3, 8, 48)


def test_an_override_stands_for_gpus_slurm_does_not_manage():
    assert from_env(JOB, gpus=4, expand=_expand).gpus_per_node == 4


@pytest.mark.parametrize("env, says", [({}, "not inside a Slurm allocation"),
                                       (JOB, "no GPUs")])
def test_outside_an_allocation_or_without_gpus_it_says_what_to_do(env, says):
    with pytest.raises(AllocationError, match=says):
        from_env(env, expand=_expand)


def test_each_agent_is_a_named_step_of_its_own_on_its_node():
    alloc = Allocation("42", ("gpu01", "gpu02"), gpus_per_node=8, cpus_per_node=64, mem_gb=500)
    argv = steps.agent_step("/py", alloc, 1, Path("/shared/run"), 2.0, slurm_gpus=True)
    srun, rest = argv[:argv.index("/py")], argv[argv.index("/py"):]
    assert srun[0] == "srun" and "--overlap" in srun and "--ntasks=1" in srun
    assert {"--nodes=1", "--nodelist=gpu02", "--job-name=interlace-agent-n1",
            "--cpus-per-task=64", "--gres=gpu:8", "--kill-on-bad-exit=0"} <= set(srun)
    assert rest[:4] == ["/py", "-m", "scheduler.tools.slurm", "agent"]
    assert rest[rest.index("--node") + 1] == "n1"
    no_gres = steps.agent_step("/py", alloc, 0, Path("/r"), 1.0, slurm_gpus=False)
    assert not any(a.startswith("--gres") for a in no_gres)


def test_the_agent_in_a_step_uses_its_own_key_and_the_shared_run_directory():
    argv = steps.node_agent("/py", "n1", [0, 1], 64, 500, Path("/shared/run"), 2.0, "gpu02",
                            ["--heartbeat", "1"])
    opts = dict(zip(argv[3::2], argv[4::2]))
    assert argv[:3] == ["/py", "-m", "node_agent.agent"]
    assert opts["--node"] == "n1" and opts["--gpus"] == "0,1" and opts["--address"] == "gpu02"
    assert opts["--client-key"] == "/shared/run/keys/clients/agent-n1.key_secret"
    assert opts["--endpoints"] == "/shared/run/endpoints.json"
    assert argv[-2:] == ["--heartbeat", "1"]


def test_sbatch_gets_the_lifecycle_options_and_the_run_options_follow_the_script(tmp_path):
    req = Request(nodes=4, gpus_per_node=8, time="24:00:00", run_dir=tmp_path / "r1",
                  warn_s=300)
    argv = sbatch_argv(req, ["--trace", "default"], script=Path("/x/interlace.sbatch"))
    script = argv.index("/x/interlace.sbatch")
    opts, run = argv[:script], argv[script + 1:]
    assert {"--nodes=4", "--ntasks-per-node=1", "--requeue", "--signal=B:USR1@300",
            "--open-mode=append", "--exclusive", "--time=24:00:00",
            "--gpus-per-node=8", f"--output={tmp_path / 'r1' / 'slurm-%j.out'}"} <= set(opts)
    assert run == ["--run-dir", str(tmp_path / "r1"), "--trace", "default"]


def test_emulated_gpus_ask_slurm_for_none_and_tell_the_launcher():
    argv = sbatch_argv(Request(nodes=2, emulate_gpus=4, requeue=False, exclusive=False),
                       script=Path("/s"))
    opts, run = argv[:argv.index("/s")], argv[argv.index("/s") + 1:]
    assert not any(a.startswith("--gpus") for a in opts) and "--no-requeue" in opts
    assert "--exclusive" not in opts
    assert run == ["--gpus-per-node", "4", "--no-requeue"]


def test_the_command_line_takes_run_options_after_a_double_dash():
    args = parse(["submit", "--nodes", "2", "--emulate-gpus", "4", "--", "--trace", "t.csv"])
    assert args.run_args == ["--trace", "t.csv"] and args.emulate_gpus == 4
    run = parse(["run", "--scheduler-arg=--round=2", "--time-scale", "50"])
    assert run.scheduler_arg == ["--round=2"] and run.time_scale == 50.0


def test_the_agent_step_command_line_is_one_the_agent_subcommand_reads():
    alloc = Allocation("42", ("a", "b"), gpus_per_node=4, cpus_per_node=32, mem_gb=100)
    argv = steps.agent_step("/py", alloc, 1, Path("/run"), 200.0, slurm_gpus=False,
                            agent_args=["--heartbeat", "1"])
    args = parse(argv[argv.index("scheduler.tools.slurm") + 1:])
    assert (args.command, args.node, args.gpus_per_node, args.cpus, args.mem) == \
        ("agent", "n1", 4, 32, 100)
    assert args.time_scale == 200.0 and args.agent_args == ["--heartbeat", "1"]


def test_run_outside_an_allocation_says_so_and_exits_2(monkeypatch, capsys):
    from scheduler.tools.slurm.cli import main

    for key in ("SLURM_JOB_ID", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        monkeypatch.delenv(key, raising=False)
    assert main(["run", "--gpus-per-node", "4"]) == 2
    assert "interlace-slurm submit" in capsys.readouterr().err
