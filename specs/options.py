"""The argparse pieces every command-line tool shares, so a bad option is one line on stderr
naming the option and the bound it broke (the bounds are specs.limits'), never a usage
block, a traceback, or a number that makes the tool hang or overflow later."""
from __future__ import annotations

import argparse
import difflib
import math
import re
from typing import Callable

from specs.gpu_speed import parse_speed
from specs.limits import show


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (exit 2): the usage block argparse prints
    first would bury the one line that says what is wrong. Subparsers inherit it. A
    misspelt option or choice gets the closest one suggested."""

    def error(self, message: str) -> None:  # type: ignore[override]
        program = self.prog.split()[0]
        self.exit(2, f"{self.prog}: error: {message}{self._suggestion(message)} "
                     f"(see {program} --help)\n")

    def _suggestion(self, message: str) -> str:
        """`; did you mean ...?` for an unknown option or an invalid choice, or ""."""
        choice = re.match(r"argument (\S+?)(?:/\S+)?: invalid choice: '(.*)' \(choose from",
                          message)
        if choice:
            name = choice.group(1)
            action = self._option_string_actions.get(name) or next(
                (a for a in self._actions if name in (a.dest, a.metavar)), None)
            names = [str(c) for c in getattr(action, "choices", None) or ()]
            return _closest(choice.group(2), names)
        unknown = re.match(r"unrecognized arguments: (--\S+)", message)
        if unknown:
            return _closest(unknown.group(1).split("=")[0], list(self._option_string_actions))
        return ""


def _closest(word: str, names: list[str]) -> str:
    close = difflib.get_close_matches(word, names, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def number(lo: float, hi: float, *, integer: bool = False, above: bool = False,
           unit: str = "") -> Callable[[str], float]:
    """An argparse type: a finite number in [lo, hi] ((lo, hi] when `above`), an integer when
    `integer`; the message names the range, so the user learns the limit from the refusal."""
    kind = "an integer" if integer else "a number"
    low = "(" if above else "["
    where = f"{kind} in {low}{show(lo)}, {show(hi)}]{' ' + unit if unit else ''}"

    def parse(text: str) -> float:
        try:
            value: float = int(text) if integer else float(text)
        except (ValueError, OverflowError):
            value = math.nan
        if not (math.isfinite(value) and (lo < value if above else lo <= value) and value <= hi):
            raise argparse.ArgumentTypeError(f"must be {where}, got {text!r}")
        return value

    parse.__name__ = "integer" if integer else "number"  # argparse names the type in errors
    return parse


def gpu_speed(text: str) -> tuple[tuple[str, str], float]:
    """An argparse type for `--gpu-speed [MODEL:]TYPE=SPEED` (specs/gpu_speed.py)."""
    try:
        return parse_speed(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
