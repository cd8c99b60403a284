"""`interlace-trace import`: public GPU-cluster logs into the Muri CSV, with a summary of
every row kept, dropped or adjusted. One module per format reads; the rest is shared."""

from __future__ import annotations

from traces.importers import helios, openb, pai, philly
from traces.importers.pipeline import Bound, Inputs, Options, run_import, summary_path
from traces.importers.rules import RowRules

# format name -> reader (each module's docstring documents its schema and rules)
FORMATS = {"philly": philly.read, "helios": helios.read, "pai": pai.read, "openb": openb.read}

__all__ = ["FORMATS", "Bound", "Inputs", "Options", "RowRules", "run_import", "summary_path"]
