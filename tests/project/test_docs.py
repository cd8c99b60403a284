"""The documents' commands are commands the code accepts.

Why: README.md, EXPERIMENTS.md and docs/*.md quote many command lines, and a newcomer copies
them. An option renamed in the code but not in a page leaves a command that fails, so this
test reads every command the pages show (the lines of their ```sh blocks, and inline `code`
that starts with a known program) and checks:

* its program exists: a script in scripts/, a console script of setup.cfg, `python -m MODULE`
  with that module present, `python bench/X.py` with that file present, or a standard tool;
* every option it uses appears in that program's --help (a subcommand's own help where one
  is named), so a renamed or removed option fails here;
* the blocks marked `<!-- quick -->` (an HTML comment on the line before the block, which a
  reader of the rendered page never sees) run and exit 0 in a temporary directory, with this
  interpreter as `python` and the console scripts running this checkout's code, and give
  what their page says they do (doc_claims.py: a check per block);
* README.md has at most 150 lines, every page it or a docs page links to exists, and every
  docs page is linked from the README.

The helps are read in one child process (each program's --help run in process there, so the
shared imports are paid once).
"""
from __future__ import annotations

import configparser
import json
import os
import re
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

import pytest

from tests.project.doc_claims import CLAIMS

ROOT = Path(__file__).resolve().parents[2]
PAGES = tuple(sorted([ROOT / "README.md", ROOT / "EXPERIMENTS.md", *(ROOT / "docs").glob("*.md")]))
README_MAX_LINES = 150
QUICK_MARK = "<!-- quick -->"

# Tools the pages may name that are not this project's: their options are theirs to check.
STANDARD_TOOLS = frozenset({
    "pip", "scancel", "scontrol", "squeue", "sbatch", "dask", "kill", "cd", "mkdir", "export",
    "cat", "ls", "curl", "sqlite3", "git", "prometheus", "chromium", "apt-get", "."})


def _console_scripts() -> dict[str, str]:
    """{name: module:function} from setup.cfg's console_scripts."""
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    text = cfg["options.entry_points"]["console_scripts"]
    pairs = (line.split("=", 1) for line in text.strip().splitlines() if "=" in line)
    return {name.strip(): target.strip() for name, target in pairs}


CONSOLE = MappingProxyType(_console_scripts())


# -- reading the pages ---------------------------------------------------------------------

@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    quick: bool


def blocks(page: Path) -> list[Block]:
    """The fenced code blocks of a page, with their language and quick mark."""
    lines = page.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
            body.append(lines[i][len(fence.group(1)):])
            i += 1
        before = next((lines[k].strip() for k in range(start - 1, -1, -1) if lines[k].strip()),
                      "")
        found.append(Block(page, start + 1, fence.group(2), "\n".join(body),
                           before == QUICK_MARK))
        i += 1
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return re.sub(r"^\s*```.*?^\s*```\s*$", "", page.read_text(), flags=re.S | re.M)


def _logical_lines(text: str) -> list[str]:
    return [line for line in text.replace("\\\n", " ").splitlines() if line.strip()]


def _split_commands(tokens: list[str]) -> list[list[str]]:
    """A shell line's commands: split at &&, ||, ; and at a pipe into a program (a `|`
    between alternatives of a usage line, `[-a X | -b Y]`, is no pipe)."""
    out, current = [], []
    for k, token in enumerate(tokens):
        nxt = tokens[k + 1] if k + 1 < len(tokens) else ""
        if token in ("&&", "||", ";") or (token == "|" and not nxt.startswith(("-", "["))):
            out.append(current)
            current = []
        else:
            current.append(token)
    out.append(current)
    return [c for c in out if c]


@dataclass(frozen=True)
class Command:
    where: str  # page:line, for the failure message
    tokens: tuple[str, ...]


def _commands_of(text: str, where: str, strict: bool) -> list[Command]:
    out = []
    for line in _logical_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError as err:
            if strict:
                raise AssertionError(f"{where}: cannot read {line!r}: {err}") from None
            continue
        out += [Command(where, tuple(c)) for c in _split_commands(tokens)]
    return out


def _is_env(token: str) -> bool:
    return re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", token) is not None


def _names_a_program(tokens: tuple[str, ...]) -> bool:
    """For inline code: whether it starts with one of this project's programs."""
    rest = [t for t in tokens if not _is_env(t)] or [""]
    head = rest[0]
    return (head in CONSOLE or re.match(r"^scripts/[\w-]+$", head) is not None
            or (head in ("python", "python3") and len(rest) > 1
                and (rest[1] == "-m" or rest[1].endswith(".py"))))


def all_commands() -> list[Command]:
    out = []
    for page in PAGES:
        name = page.relative_to(ROOT)
        for block in blocks(page):
            if block.lang == "sh":
                out += _commands_of(block.text, f"{name}:{block.line}", strict=True)
        for span in re.findall(r"`([^`\n]+)`", prose(page)):
            found = _commands_of(span, f"{name}: `{span}`", strict=False)
            out += [c for c in found if _names_a_program(c.tokens)]
    return out


# -- what a command runs -------------------------------------------------------------------

@dataclass(frozen=True)
class Program:
    kind: str  # module, file, entry, text, standard
    target: str  # module name, file path, module:function, script path, or tool name
    name: str  # as the page writes it
    args: tuple[str, ...]  # the arguments after it


def _script_program(path: str) -> tuple[str, str]:
    """(kind, target) whose help a script's options are checked against: the module it
    execs with "$@", else the script's own text (its usage)."""
    text = (ROOT / path).read_text()
    module = re.search(r'exec "\$PY" -m ([\w.]+)[^\n]*"\$@"', text)
    return ("module", module.group(1)) if module else ("text", path)


def program_of(command: Command) -> Program:
    tokens = [t for t in command.tokens]
    while tokens and _is_env(tokens[0]):
        tokens.pop(0)
    assert tokens, f"{command.where}: an assignment is no command"
    head, rest = tokens[0], tuple(tokens[1:])
    if head in ("python", "python3"):
        assert rest, f"{command.where}: python with nothing to run"
        if rest[0] == "-m":
            module = rest[1]
            assert _module_exists(module), f"{command.where}: no module {module}"
            return Program("module", module, f"python -m {module}", rest[2:])
        if rest[0] == "setup.py":
            assert (ROOT / "setup.py").is_file()
            return Program("standard", "setup.py", "python setup.py", rest[1:])
        if rest[0].endswith(".py"):
            assert (ROOT / rest[0]).is_file(), f"{command.where}: no file {rest[0]}"
            return Program("file", rest[0], f"python {rest[0]}", rest[1:])
        raise AssertionError(f"{command.where}: cannot tell what `python {rest[0]}` runs")
    if head.startswith("scripts/"):
        path = ROOT / head
        assert path.is_file() and os.access(path, os.X_OK), \
            f"{command.where}: {head} is no executable script"
        kind, target = _script_program(head)
        return Program(kind, target, head, rest)
    if head in CONSOLE:
        return Program("entry", CONSOLE[head], head, rest)
    if head in STANDARD_TOOLS:
        return Program("standard", head, head, rest)
    raise AssertionError(f"{command.where}: unknown program {head!r} (not in scripts/, "
                         f"setup.cfg's console scripts, python -m/bench, or standard tools)")


def _module_exists(module: str) -> bool:
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def _own_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """The arguments that are the program's own: those before a bare `--`, after which
    come another program's (interlace-submit's command, interlace-slurm run's options)."""
    return args[:args.index("--")] if "--" in args else args


def options_of(args: tuple[str, ...]) -> list[str]:
    """The options a command uses, as its help would spell them (`--out=x` -> `--out`;
    usage brackets and a trailing comma dropped)."""
    out = []
    for token in _own_args(args):
        token = token.strip("[](),")
        if re.match(r"^--?[A-Za-z][\w-]*(=.*)?$", token):
            out.append(token.split("=", 1)[0])
    return out


def first_positional(args: tuple[str, ...]) -> str | None:
    """The first argument when it is no option: a subcommand where the program has them."""
    own = _own_args(args)
    return own[0] if own and not own[0].startswith(("-", "[")) else None


# -- the helps, read in one child process ----------------------------------------------------

HELP_READER = r'''
import contextlib, importlib, io, json, os, re, runpy, sys

def run(kind, target, name, args):
    out = io.StringIO()
    argv, path, modules = sys.argv[:], sys.path[:], set(sys.modules)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            if kind == "module":
                sys.argv = [name, *args]
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            elif kind == "file":
                sys.argv = [target, *args]
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                runpy.run_path(target, run_name="__main__")
            elif kind == "entry":
                module, function = target.split(":")
                sys.argv = [name, *args]
                getattr(importlib.import_module(module), function)()
    except SystemExit:
        pass
    except BaseException as err:
        out.write(f"\n[help reader] {type(err).__name__}: {err}\n")
    finally:
        sys.argv, sys.path[:] = argv, path
    return out.getvalue()

answers = {}
for kind, target, name, subs in json.loads(sys.argv[1]):
    top = run(kind, target, name, ["--help"])
    usage = top.split("\n\n")[0]
    choices = set()  # a positional's choices: subcommands (an option's choices are values)
    for found in re.finditer(r"\{([\w,-]+)\}", usage):
        before = usage[:found.start()].split()
        takes_it = before and before[-1].lstrip("[").startswith("-") \
            and not before[-1].endswith("]")  # `[--preset {a,b}]`, not `[-h] {a,b}`
        if not takes_it:
            choices.update(found.group(1).split(","))
    answers[f"{kind} {target}"] = {
        "help": top,
        "subs": {s: run(kind, target, f"{name} {s}", [s, "--help"]) for s in subs
                 if s in choices}}
print(json.dumps(answers))
'''


def read_helps(programs: list[Program]) -> dict[str, dict]:
    """{'kind target': {'help': text, 'subs': {sub: text}}} for the programs that have one."""
    wanted: dict[tuple[str, str], tuple[str, set]] = {}
    for p in programs:
        if p.kind in ("module", "file", "entry"):
            name, subs = wanted.setdefault((p.kind, p.target), (p.name, set()))
            sub = first_positional(p.args)
            if sub is not None:
                subs.add(sub)
    request = [[kind, target, name, sorted(subs)]
               for (kind, target), (name, subs) in wanted.items()]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), OMP_NUM_THREADS="1",
        MPLBACKEND="Agg")
    proc = subprocess.run([sys.executable, "-c", HELP_READER, json.dumps(request)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    helps = json.loads(proc.stdout.strip().splitlines()[-1])
    for p in programs:  # a script without a module: its own text is its usage
        if p.kind == "text":
            helps[f"text {p.target}"] = {"help": (ROOT / p.target).read_text(), "subs": {}}
    return helps


def help_for(program: Program, helps: dict) -> str:
    entry = helps[f"{program.kind} {program.target}"]
    sub = first_positional(program.args)
    return entry["subs"].get(sub, entry["help"]) if sub else entry["help"]


def has_option(text: str, option: str) -> bool:
    return re.search(rf"(?<![\w-]){re.escape(option)}(?![\w-])", text) is not None


def missing_options(pairs: list[tuple[Command, Program]], helps: dict) -> list[str]:
    problems = []
    for command, program in pairs:
        if program.kind == "standard":
            continue
        text = help_for(program, helps)
        assert "[help reader]" not in text, f"{command.where}: {program.name} --help: {text}"
        for option in options_of(program.args):
            if not has_option(text, option):
                problems.append(f"{command.where}: {program.name} has no option {option}")
    return problems


@pytest.fixture(scope="module")
def checked():
    """(every command with its program, the helps of those programs, the commands whose
    program is missing)."""
    pairs, problems = [], []
    for command in all_commands():
        try:
            pairs.append((command, program_of(command)))
        except AssertionError as err:
            problems.append(str(err))
    return pairs, read_helps([p for _, p in pairs]), problems


# -- the tests -----------------------------------------------------------------------------

def test_the_pages_show_commands():
    """The extraction finds what the pages hold (a parser that found nothing passes all)."""
    commands = all_commands()
    heads = {program_of(c).name for c in commands}
    assert {"interlace-sim", "interlace-trace", "scripts/demo", "scripts/test",
            "scripts/start-scheduler", "python bench/fidelity.py"} <= heads, heads
    assert len(commands) > 100


def test_every_command_names_a_program_that_exists(checked):
    _, _, problems = checked
    assert not problems, "\n".join(problems)


def test_every_option_a_command_uses_is_in_its_programs_help(checked):
    pairs, helps, _ = checked
    problems = missing_options(pairs, helps)
    assert not problems, "\n".join(problems)


def test_no_command_hides_outside_an_sh_block():
    """Code blocks without a language, or indented ones, escape the checks: commands go in
    ```sh blocks."""
    problems = []
    for page in PAGES:
        name = page.relative_to(ROOT)
        for block in blocks(page):
            if not block.lang:
                problems.append(f"{name}:{block.line}: a code block without a language")
        for n, line in enumerate(prose(page).splitlines(), 1):
            if re.match(r"^ {4,}(interlace-|scripts/|python )", line):
                problems.append(f"{name}: an indented command: {line.strip()}")
    assert not problems, "\n".join(problems)


def _shims(bin_dir: Path) -> None:
    """`python` is this interpreter and each console script runs this checkout's code,
    whatever is (or is not) installed."""
    bin_dir.mkdir()
    scripts = {"python": f'exec "{sys.executable}" "$@"'}
    for name, target in CONSOLE.items():
        module, function = target.split(":")
        code = (f"import sys; from {module} import {function}; sys.argv[0] = {name!r}; "
                f"sys.exit({function}())")
        scripts[name] = f'exec "{sys.executable}" -c "{code}" "$@"'
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)


def quick_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.quick]


def test_there_are_quick_blocks():
    quick = quick_blocks()
    assert len(quick) >= 3 and all(b.lang == "sh" for b in quick), quick


@pytest.mark.parametrize("block", quick_blocks(),
                         ids=lambda b: f"{b.page.name}:{b.line}")
def test_quick_commands_run(block, tmp_path):
    _shims(tmp_path / "bin")
    work = tmp_path / "work"
    work.mkdir()
    for folder in ("scripts", "bench", "examples"):  # commands name them from the root
        (work / folder).symlink_to(ROOT / folder)
    env = dict(os.environ, PATH=os.pathsep.join([str(tmp_path / "bin"), os.environ["PATH"]]),
               PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", MPLBACKEND="Agg")
    proc = subprocess.run(["bash", "-e", "-c", block.text], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (f"{block.page.name}:{block.line} exited {proc.returncode}\n"
                                  f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    CLAIMS[_claim_key(block)](proc.stdout, work)


def _claim_key(block: Block) -> tuple[str, str]:
    return block.page.name, block.text.splitlines()[0]


def test_every_quick_block_is_checked_for_what_its_page_says():
    assert sorted(map(_claim_key, quick_blocks())) == sorted(CLAIMS)


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, len(lines)


def _links(page: Path) -> list[tuple[str, str]]:
    """(file, anchor) of each relative link on the page; anchor '' when there is none."""
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(page))
    return [tuple((t + "#").split("#")[:2]) for t in targets
            if not re.match(r"^(https?:|mailto:|#)", t)]


def anchors(page: Path) -> set[str]:
    """The heading anchors a Markdown renderer such as GitHub's makes for the page."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", prose(page), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_every_linked_page_and_section_exists():
    problems = []
    for page in PAGES:
        for target, anchor in _links(page):
            path = page.parent / target
            if not path.exists():
                problems.append(f"{page.relative_to(ROOT)}: {target} does not exist")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                problems.append(f"{page.relative_to(ROOT)}: {target} has no section #{anchor}")
    assert not problems, "\n".join(problems)


def test_the_readme_links_every_docs_page():
    linked = {(ROOT / t).resolve() for t, _ in _links(ROOT / "README.md")}
    missing = [p.name for p in (ROOT / "docs").glob("*.md") if p.resolve() not in linked]
    assert not missing, missing
