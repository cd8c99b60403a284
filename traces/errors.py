"""Error types shared by the trace reader, the validator and the CLI."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a trace, located precisely enough for a user to fix it.

    `line` is the physical file line (header = 1) for files, and the 1-based position in
    the list for in-memory records; `line` or `field` is None when it does not apply.
    """

    file: str
    line: int | None
    field: str | None
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.field:
            return f"{where}: {self.field}: {self.message}"
        return f"{where}: {self.message}"


class TraceError(Exception):
    """Raised once per file with every problem found, so a user fixes them in one pass."""

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        super().__init__(str(self))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)
