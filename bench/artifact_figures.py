"""The published values of the paper's Figs. 9-13, read from the artifact's draw scripts.

The artifact (Rivendile/Muri, never part of this repository) keeps each figure's raw values
as Python lists in `simulator/draw_fig9-10.py` and `simulator/draw_fig11-13.py`. This reads
those lists without running the scripts (they import matplotlib and draw) and says, for each
value, which run makes it: trace, policy and the paper preset's fields that figure changed
(Fig. 12's group size; Fig. 13's auto-unpack, on there as in the artifact's default flags).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

#: the traces each script's lists run over, in list order
FIG9_10_TRACES = ("trace1", "trace1_pr", "trace2", "trace2_pr", "trace3", "trace3_pr",
                  "trace4", "trace4_pr")
FIG11_TRACES = ("trace1", "trace2", "trace3", "trace4")
FIG12_TRACES = ("trace1_pr", "trace2_pr", "trace3_pr", "trace4_pr")
FIG13_TRACES = ("job_type_1", "job_type_2", "job_type_3", "job_type_4")
METRIC = {"JCT": "avg_jct", "Makespan": "makespan", "99JCT": "p99_jct"}
UNPACK_ON = (("muri_auto_unpack", True),)

# list name (without _<metric>_raw) -> (figure, traces, policy, preset overrides)
FIG9_10 = {"SRTF": "srtf", "SRSF": "srsf", "Muri_S": "muri-s", "Tiresias_L": "tiresias",
           "antman": "antman", "themis": "themis", "Muri_L": "muri-l"}
FIG11 = {"Fig11_Muri_L": "muri-l", "Fig11_Muri_L_w_worstordering": "muri-l-worst",
         "Fig11_Muri_L_wo_blossom": "muri-l-nomatch"}
FIG12 = {"Fig12_antman": ("antman", ()), "Fig12_Muri_L_2": ("muri-l", (("muri_max_group", 2),)),
         "Fig12_Muri_L_3": ("muri-l", (("muri_max_group", 3),)), "Fig12_Muri_L_4": ("muri-l", ())}
FIG13 = {"Fig13_SRTF": ("srtf", ()), "Fig13_Muri_S": ("muri-s", UNPACK_ON),
         "Fig13_Tiresias": ("tiresias", ()), "Fig13_Muri_L": ("muri-l", UNPACK_ON)}


@dataclass(frozen=True)
class Published:
    """One published value and the run that makes it."""

    figure: str
    trace: str
    policy: str
    metric: str  # avg_jct, makespan or p99_jct
    value: float
    overrides: tuple = field(default=())  # (preset field, value) pairs

    @property
    def run(self) -> tuple:
        return (self.trace, self.policy, self.overrides)


def raw_lists(path: Path) -> dict[str, list[float]]:
    """Every `NAME_raw = [numbers]` assignment of a script, evaluated as a literal only."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id.endswith("_raw"):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                continue
            if isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
                out[node.targets[0].id] = [float(v) for v in value]
    return out


def _split(name: str) -> tuple[str, str] | None:
    """'Muri_S_99JCT_raw' -> ('Muri_S', 'p99_jct'); Fig. 13's lists name no metric (JCT)."""
    stem = name[:-len("_raw")]
    for suffix, metric in METRIC.items():
        if stem.endswith("_" + suffix):
            return stem[:-len(suffix) - 1], metric
    return (stem, "avg_jct") if stem.startswith("Fig13_") else None


def published(artifact: Path) -> list[Published]:
    """The published values of Figs. 9-13 found in `artifact` (the repository's root or its
    simulator/ folder); a script that is not there gives none."""
    folder = artifact / "simulator" if (artifact / "simulator").is_dir() else artifact
    out: list[Published] = []
    script = folder / "draw_fig9-10.py"
    if script.is_file():
        for name, values in raw_lists(script).items():
            parts = _split(name)
            if parts and parts[0] in FIG9_10 and len(values) == len(FIG9_10_TRACES):
                figure = "10" if parts[1] == "p99_jct" else "9"
                out += [Published(figure, t, FIG9_10[parts[0]], parts[1], v)
                        for t, v in zip(FIG9_10_TRACES, values)]
    script = folder / "draw_fig11-13.py"
    if script.is_file():
        for name, values in raw_lists(script).items():
            parts = _split(name)
            if not parts:
                continue
            stem, metric = parts
            if stem in FIG11 and len(values) == len(FIG11_TRACES):
                out += [Published("11", t, FIG11[stem], metric, v)
                        for t, v in zip(FIG11_TRACES, values)]
            elif stem in FIG12 and len(values) == len(FIG12_TRACES):
                policy, overrides = FIG12[stem]
                out += [Published("12", t, policy, metric, v, overrides)
                        for t, v in zip(FIG12_TRACES, values)]
            elif stem in FIG13 and len(values) == len(FIG13_TRACES):
                policy, overrides = FIG13[stem]
                out += [Published("13", t, policy, metric, v, overrides)
                        for t, v in zip(FIG13_TRACES, values)]
    return out


def trace_folder(artifact: Path) -> Path:
    """Where the artifact keeps the traces its figures ran on."""
    folder = artifact / "simulator" if (artifact / "simulator").is_dir() else artifact
    return folder / "trace-data"
