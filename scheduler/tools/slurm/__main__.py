"""`python -m scheduler.tools.slurm`: the same as the `interlace-slurm` console script."""
import sys

from scheduler.tools.slurm.cli import main

if __name__ == "__main__":
    sys.exit(main())
