"""Hypothesis profiles: `ci` draws the same examples on every run, so a red CI always
reproduces; a developer's run (the default profile) explores fresh ones each time."""
import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
