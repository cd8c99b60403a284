"""`interlace-trace import`: public GPU-cluster logs into the Muri CSV, with a summary of
every row kept, dropped or adjusted. One module per format reads; the rest is shared."""

from __future__ import annotations

from traces.importers import gavel, helios, openb, pai, philly
from traces.importers.gavel_models import model_map
from traces.importers.pipeline import Bound, Inputs, Options, run_import, summary_path
from traces.importers.rules import RowRules

# format name -> reader (each module's docstring documents its schema and rules)
FORMATS = {"philly": philly.read, "helios": helios.read, "pai": pai.read, "openb": openb.read,
           "gavel": gavel.read}
# what a format states of a job's GPUs beyond their count (run_import's summary repeats it);
# the others state nothing more (pipeline.NO_GPU_FACTS)
GPU_FACTS = {"openb": openb.GPU_FACTS}
# what else an import of the format decides, which its summary states under `notes`
NOTES = {"gavel": {"models": model_map(), "clock": gavel.CLOCK}}
# the --models rule a format imports by when none is given
DEFAULT_MODELS = {"gavel": "log"}

__all__ = ["DEFAULT_MODELS", "FORMATS", "GPU_FACTS", "NOTES", "Bound", "Inputs", "Options",
           "RowRules", "run_import", "summary_path"]
