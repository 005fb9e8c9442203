"""Transcripts in the documentation: commands shown with what they print, checked by running.

A *transcript* in a Markdown file is

* a fenced block whose first line starts with ``$ ``: each ``$ command`` line is followed by
  the output that command prints (up to the next ``$ `` line or the end of the block); or
* a fenced ```` ```sh ```` block directly followed (blank lines only in between) by an
  unlabelled fenced block: the commands, then everything they print.

Each command runs from the repository root (a scratch folder whose entries link to the
root's, so files a command writes land there, not in the checkout) on ``sim://``
(``$DVSDK_DEVICE`` unset), with the checkout importable. ``pip install`` steps (joined
with ``&&``) are skipped; ``python3`` is the interpreter running the tests and dvsdk's
console scripts are their modules (``dvsdk-run`` is ``python -m dvsdk.cli.run``), so the
checkout's code runs, not an installed copy. A command must exit 0, and its standard
output is compared with the document line by line (trailing spaces ignored):

* a line that is only ``...`` or ``…`` stands for any number of lines, none included;
* ``…`` inside a line stands for any text (an absolute path, say);
* an HTML comment right before the block (for a command block and its output, before the
  command block) that starts with ``<!-- varies`` lists, one a line up to ``-->``, regular
  expressions of the tokens that differ from run to run: host wall-clock times (ms, FPS,
  compile seconds). Where an expression matches, in the document's line and in the actual
  one, the matched text (or, when the expression has groups, what the groups match) is left
  out of the comparison; the rest of the line must still be the same, and the actual line
  must have a match at that place.

Everything else must be the same character for character: predicted device times, cycles,
bytes, percentages and class scores are deterministic on the simulator (its arithmetic is
``firmware_spec/arithmetic.md``'s, the same bits on every machine).
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: console scripts (pyproject.toml [project.scripts]) as the modules that run them
SCRIPTS = {
    "dvsdk": "dvsdk.cli.main",
    "dvsdk-compile": "dvsdk.cli.compile",
    "dvsdk-run": "dvsdk.cli.run",
    "dvsdk-agent": "dvsdk.link.agent",
}
PYTHONS = {"python", "python3"}
ELISIONS = {"...", "…"}
VARY = "\x00"  # what a varying token becomes on both sides of the comparison

_FENCE = re.compile(r"^(\s*)```\s*([\w+-]*)\s*$")


@dataclass
class Block:
    """A fenced block: where it starts (1-based line of the opening fence), its language,
    its lines (the fence's indentation removed) and the ``varies`` expressions before it."""

    line: int
    end: int
    lang: str
    lines: list[str]
    varies: list[re.Pattern] = field(default_factory=list)


@dataclass
class Step:
    """One command of a transcript and the output the document shows for it (``None``:
    the output shown belongs to the transcript's last command)."""

    command: str
    expected: list[str] | None


@dataclass
class Transcript:
    doc: str            # path relative to the repository root
    line: int           # the block's first line in the document
    steps: list[Step]
    varies: list[re.Pattern]

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def _varies(comment: list[str]) -> list[re.Pattern]:
    """``<!-- varies ...`` then one regular expression a line, then ``-->``."""
    if not comment or not comment[0].lstrip().startswith("<!-- varies"):
        return []
    body = [ln.strip() for ln in comment[1:]]
    if body and body[-1] == "-->":
        body = body[:-1]
    return [re.compile(rx) for rx in body if rx]


def blocks(text: str) -> list[Block]:
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, lang = m.group(1), m.group(2)
        # an HTML comment ending on the line before the fence
        comment: list[str] = []
        if i > 0 and lines[i - 1].strip().endswith("-->"):
            j = i - 1
            while j >= 0 and "<!--" not in lines[j]:
                j -= 1
            comment = lines[j:i] if j >= 0 else []
        j = i + 1
        body = []
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        out.append(Block(i + 1, j + 1, lang, body, _varies(comment)))
        i = j + 1
    return out


def _commands(lines: list[str]) -> list[str]:
    """A shell block's commands: continuation lines (``\\``) joined, comments left out."""
    commands, cur = [], ""
    for ln in lines:
        if ln.rstrip().endswith("\\"):
            cur += ln.rstrip()[:-1] + " "
            continue
        cur += ln
        if cur.strip() and not cur.strip().startswith("#"):
            commands.append(cur.strip())
        cur = ""
    return commands


def transcripts(doc: str) -> list[Transcript]:
    """Every transcript in ``doc`` (a path relative to the repository root)."""
    text = (ROOT / doc).read_text()
    lines = text.splitlines()
    found: list[Transcript] = []
    bs = blocks(text)
    for k, b in enumerate(bs):
        if b.lines and b.lines[0].startswith("$ ") and b.lang in ("", "console", "text"):
            steps: list[Step] = []
            for ln in b.lines:
                if ln.startswith("$ "):
                    steps.append(Step(ln[2:], []))
                else:
                    steps[-1].expected.append(ln)
            found.append(Transcript(doc, b.line, steps, b.varies))
        elif b.lang == "sh" and k + 1 < len(bs):
            nxt = bs[k + 1]
            between = lines[b.end:nxt.line - 1]
            if (nxt.lang == "" and not any(ln.strip() for ln in between)
                    and not (nxt.lines and nxt.lines[0].startswith("$ "))):
                steps = [Step(c, None) for c in _commands(b.lines)]
                steps[-1].expected = list(nxt.lines)
                found.append(Transcript(doc, b.line, steps, b.varies))
    return found


# -- running ------------------------------------------------------------------------------

def argvs(command: str) -> list[tuple[dict[str, str], list[str]]]:
    """The ``&&``-joined commands of one line, as (environment additions, argv), with
    ``pip install`` steps left out and console scripts as ``python -m`` their module."""
    tokens = shlex.split(command, comments=True)
    parts: list[list[str]] = [[]]
    for t in tokens:
        if t == "&&":
            parts.append([])
        else:
            parts[-1].append(t)
    out = []
    for part in parts:
        env = {}
        while part and re.fullmatch(r"[A-Za-z_]\w*=.*", part[0]):
            name, _, value = part.pop(0).partition("=")
            env[name] = value
        if not part:
            continue
        words = part[1:] if part[0] in PYTHONS else part
        if words[:2] == ["-m", "pip"] or words[:1] == ["pip"] or part[0] == "pip":
            continue                         # the install: the tests run the checkout
        if part[0] in PYTHONS:
            argv = [sys.executable, *part[1:]]
        elif part[0] in SCRIPTS:
            argv = [sys.executable, "-m", SCRIPTS[part[0]], *part[1:]]
        else:
            raise ValueError(f"a transcript runs python3 or dvsdk's commands only: {command!r}")
        out.append((env, argv))
    return out


def scratch_root(folder: Path) -> Path:
    """``folder`` made to look like the repository root: a link to each of its entries."""
    for entry in ROOT.iterdir():
        if entry.name != ".git" and not (folder / entry.name).exists():
            (folder / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return folder


@dataclass
class Result:
    command: str
    returncode: int
    stdout: str
    stderr: str


def run(command: str, cwd: Path, timeout: float = 120) -> Result:
    env = dict(os.environ)
    env.pop("DVSDK_DEVICE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in [env.get("PYTHONPATH")]
                                                       if p])
    stdout, stderr, rc = "", "", 0
    for extra, argv in argvs(command):
        proc = subprocess.run(argv, cwd=cwd, env={**env, **extra}, capture_output=True,
                              text=True, timeout=timeout)
        stdout, stderr, rc = stdout + proc.stdout, stderr + proc.stderr, proc.returncode
        if rc:
            break
    return Result(command, rc, stdout, stderr)


# -- comparing ----------------------------------------------------------------------------

def mask(line: str, varies: list[re.Pattern]) -> str:
    """``line`` with what each expression (or each of its groups) matches made VARY."""
    for rx in varies:
        spans: list[tuple[int, int]] = []
        for m in rx.finditer(line):
            groups = range(1, rx.groups + 1) if rx.groups else [0]
            spans += [m.span(g) for g in groups if m.start(g) >= 0]
        last = len(line) + 1
        for a, b in sorted(spans, reverse=True):
            if b <= last:                    # nested or overlapping groups: the outer one
                line = line[:a] + VARY + line[b:]
                last = a
    return line


@lru_cache(maxsize=4096)
def _line_pattern(doc_line: str) -> re.Pattern:
    return re.compile(".*?".join(re.escape(p) for p in doc_line.split("…")), re.S)


def compare(expected: list[str], actual: list[str], varies: list[re.Pattern]) -> str | None:
    """None when ``actual`` matches the document's ``expected`` lines, else a message with
    the first document line that does not match and the actual line it met."""
    doc = [ln.rstrip() for ln in expected]
    while doc and not doc[-1]:
        doc.pop()
    act = [ln.rstrip() for ln in actual]
    while act and not act[-1]:
        act.pop()
    pats = [None if d.strip() in ELISIONS else _line_pattern(mask(d, varies)) for d in doc]
    masked = [mask(a, varies) for a in act]
    n, m = len(doc), len(act)
    # reach[i][j]: the first i document lines match the first j actual lines
    reach = [[False] * (m + 1) for _ in range(n + 1)]
    reach[0][0] = True
    for i in range(n + 1):
        for j in range(m + 1):
            if not reach[i][j] or i == n:
                continue
            if pats[i] is None:
                for jj in range(j, m + 1):
                    reach[i + 1][jj] = True
            elif j < m and pats[i].fullmatch(masked[j]):
                reach[i + 1][j + 1] = True
    if reach[n][m]:
        return None
    # the first document line no alignment gets past, and the actual line it met (after
    # an elision, of the lines it could have met, the most similar)
    i = max(k for k in range(n + 1) if any(reach[k]))
    met = [jj for jj in range(m) if reach[i][jj]]
    if i == n:
        return (f"the output goes on after the document's last line:\n"
                f"  actual line {met[0] + 1}: {act[met[0]]!r}")
    if not met:
        return f"document line {i + 1}: {doc[i]!r}\n  actual: the output ended at line {m}"
    j = max(met, key=lambda jj: difflib.SequenceMatcher(None, doc[i], act[jj]).ratio())
    return f"document line {i + 1}: {doc[i]!r}\n  actual line {j + 1}: {act[j]!r}"


def check(t: Transcript, cwd: Path) -> list[str]:
    """Run transcript ``t``; the problems found (empty when it matches)."""
    problems: list[str] = []
    printed = ""
    for step in t.steps:
        r = run(step.command, cwd)
        printed += r.stdout
        if r.returncode:
            problems.append(f"$ {step.command}\nexited {r.returncode}\n{r.stdout}{r.stderr}")
            break
        if step.expected is None:
            continue
        why = compare(step.expected, printed.splitlines(), t.varies)
        if why:
            problems.append(f"{t.id}: $ {step.command}\n{why}\n-- the whole output:\n"
                            f"{printed}" + (f"-- stderr:\n{r.stderr}" if r.stderr else ""))
        printed = ""
    return problems


if __name__ == "__main__":  # python -m tests.transcripts [DOC ...]: print what each prints
    import tempfile

    docs = sys.argv[1:] or ["README.md", "examples/README.md", "examples/models/README.md"]
    with tempfile.TemporaryDirectory() as tmp:
        where = scratch_root(Path(tmp))
        for doc in docs:
            for t in transcripts(doc):
                for step in t.steps:
                    r = run(step.command, where)
                    print(f"== {t.id}  $ {step.command}  (exit {r.returncode})")
                    print(r.stdout + r.stderr, end="")
