"""An Interlace policy plug-in: the jobs wanting the most GPUs first, FIFO among equals."""
from interlace_policy_example.policy import LargestFirst

__all__ = ["LargestFirst"]
