"""`python -m scheduler.live`: the live scheduler (scheduler/live/cli.py)."""
import sys

from scheduler.live.cli import main

sys.exit(main())
