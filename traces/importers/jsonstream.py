"""The elements of a JSON array file, one at a time, without holding the file in memory.

Philly's `cluster_job_log` is one JSON list of about 100,000 jobs; `json.load` would hold
all of it. This reads chunks and decodes element by element with `raw_decode`, keeping only
the undecoded tail of the text, and counts newlines so problems name their line.
"""

from __future__ import annotations

import codecs
import json
import os
from typing import Iterator

from traces.errors import Problem, TraceError
from traces.importers.source import Progress, open_problem

CHUNK = 1 << 20
MAX_ELEMENT = 64 << 20  # an element longer than this is taken to be malformed, not unfinished
_SPACE = " \t\r\n"


def iter_array(path: str | os.PathLike[str], progress: Progress, base: int = 0,
               chunk: int = CHUNK) -> Iterator[tuple[int, object]]:
    """(line where the element starts, element) for each element of the top-level array."""
    label = os.fspath(path)
    problem = open_problem(path)
    if problem is not None:
        raise TraceError([problem])
    decoder = json.JSONDecoder()
    with open(label, "rb") as raw:
        text = _Text(raw, label, chunk)
        if not text.skip_space():
            raise TraceError([Problem(label, None, None, "file is empty")])
        if text.peek() != "[":
            text.fail("expected a JSON list '[' of jobs")
        text.advance(1)
        expect_value = True
        first = True
        while True:
            if not text.skip_space():
                text.fail("unexpected end of file inside the job list")
            char = text.peek()
            if char == "]" and (first or not expect_value):
                text.advance(1)
                break
            if not expect_value:
                if char != ",":
                    text.fail("expected ',' or ']' between jobs")
                text.advance(1)
                expect_value = True
                continue
            line = text.line
            value = text.decode(decoder)
            yield line, value
            first, expect_value = False, False
            progress(base + raw.tell())
        if text.skip_space():
            text.fail("unexpected text after the job list")


def _cut_number(value: object, following: str) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) \
        and following in "0123456789.eE+-"


class _Text:
    """The undecoded tail of the file and the line it starts on."""

    def __init__(self, raw, label: str, chunk: int):
        self.raw, self.label, self.chunk = raw, label, chunk
        self.decoder = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.pos, self.line, self.eof = "", 0, 1, False
        self._bom = True

    def more(self) -> bool:
        if self.eof:
            return False
        data = self.raw.read(self.chunk)
        try:
            text = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError as exc:
            self.fail(f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x})")
        if self._bom:
            text, self._bom = text.lstrip("\ufeff"), False
        if self.pos > self.chunk:
            self.buf, self.pos = self.buf[self.pos:], 0
        self.buf += text
        self.eof = not data
        return True

    def skip_space(self) -> bool:
        """Move past white space; False at the end of the file."""
        while True:
            start = self.pos
            while self.pos < len(self.buf) and self.buf[self.pos] in _SPACE:
                self.pos += 1
            self.line += self.buf.count("\n", start, self.pos)
            if self.pos < len(self.buf):
                return True
            if not self.more():
                return False

    def peek(self) -> str:
        return self.buf[self.pos]

    def advance(self, count: int) -> None:
        self.line += self.buf.count("\n", self.pos, self.pos + count)
        self.pos += count

    def decode(self, decoder: json.JSONDecoder) -> object:
        while True:
            try:
                value, end = decoder.raw_decode(self.buf, self.pos)
            except json.JSONDecodeError as exc:
                if self.eof or len(self.buf) - self.pos > MAX_ELEMENT:
                    line = self.line + self.buf.count("\n", self.pos, exc.pos)
                    raise TraceError([Problem(self.label, line, None,
                                              f"malformed JSON: {exc.msg}")]) from None
                self.more()
                continue
            except RecursionError:
                self.fail("JSON nested too deeply")
            if not self.eof and (end == len(self.buf) or _cut_number(value, self.buf[end])):
                self.more()  # a number may go on in the next chunk ("0" of "0.5")
                continue
            self.advance(end - self.pos)
            return value

    def fail(self, message: str):
        raise TraceError([Problem(self.label, self.line, None, message)])
