"""Interlace inside a Slurm allocation (`interlace-slurm`, `python -m scheduler.tools.slurm`).

Why: lab clusters hand out nodes through Slurm, so Interlace runs as one Slurm job: the
broker and scheduler on the allocation's first node, one agent per node as a job step of its
own, and the jobs interleaved inside the allocation. Modules, one job each:

    allocation.py  what the allocation is (nodes, GPUs, CPUs, memory), from SLURM_* variables
    steps.py       the command lines: each agent's `srun` step, and the agent inside it
    launcher.py    inside the allocation: keys, broker, scheduler, agents, feeder; shutdown
    submit.py      outside: `sbatch` of scripts/slurm/interlace.sbatch with the right options
    cli.py         the command line (run, agent, submit)
"""
