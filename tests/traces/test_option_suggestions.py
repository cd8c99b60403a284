"""A misspelt option, choice or subcommand of any tool is one line, exit 2, with the closest
name suggested; a word nothing resembles gets no suggestion."""
from __future__ import annotations

import pytest

from scheduler.sim.cli import main as sim
from specs.cli import main as spec
from traces.cli import main as trace


def _status(tool, argv) -> int:
    """The exit status, whether the tool returns it or raises SystemExit."""
    try:
        return tool(argv)
    except SystemExit as stop:
        return stop.code


@pytest.mark.parametrize("tool, argv, says", [
    (sim, ["--preset", "papr"], "invalid choice: 'papr' (choose from 'default', 'paper'); "
                                "did you mean 'paper'?"),
    (sim, ["--plto", "x.png"], "unrecognized arguments: --plto x.png; did you mean '--plot'?"),
    (sim, ["--explian"], "did you mean '--explain'?"),
    (trace, ["generat", "--jobs", "3"], "did you mean 'generate'?"),
    (spec, ["shw", "n8g8"], "did you mean 'show'?"),
])
def test_a_misspelling_gets_the_closest_name(tool, argv, says, capsys):
    assert _status(tool, argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0], err


def test_a_word_nothing_resembles_gets_no_suggestion(capsys):
    assert _status(sim, ["--zzzz"]) == 2
    assert "did you mean" not in capsys.readouterr().err
