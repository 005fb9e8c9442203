"""The READMEs stay true: their Python examples run as written, and every transcript (a
command shown with what it prints) prints what the document shows.

Transcripts are found, run and compared by :mod:`tests.transcripts`, whose docstring is
the convention (also summarized at the top of each README that has transcripts):

* ``$ command`` lines in a fenced block, each followed by its output; or a ```` ```sh ````
  block directly followed by an unlabelled block with the output;
* run from the repository root on ``sim://``, ``pip install`` steps skipped, ``python3``
  and dvsdk's console scripts from this checkout; each must exit 0;
* compared line by line: a line ``...`` or ``…`` skips any number of lines, ``…`` inside a
  line matches any text (absolute paths), and an HTML comment ``<!-- varies`` before the
  block lists regular expressions, one a line, of tokens that differ between runs (host
  wall-clock ms, FPS, compile seconds); everything else, predicted device times, cycles,
  bytes, percentages, scores, must be the same, since the simulator is deterministic.

A failure prints the document's line and the actual one, and the whole output; ``python -m
tests.transcripts`` prints what every transcript's commands print now, for regenerating.
"""

from __future__ import annotations

import re
import sys

import pytest

from . import transcripts as T
from .conftest import ROOT

BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)

#: the documents with transcripts, and how many each has at least (a parser that stops
#: finding them must not pass by checking nothing)
DOCS = {"README.md": 1, "examples/README.md": 5, "examples/models/README.md": 2}
TRANSCRIPTS = [t for doc in DOCS for t in T.transcripts(doc)]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, capsys):
    exec(compile(BLOCKS[index], f"README.md[{index}]", "exec"), {})


# -- transcripts ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def root_view(tmp_path_factory):
    """The repository root as commands see it, in a scratch folder (what they write stays
    there)."""
    return T.scratch_root(tmp_path_factory.mktemp("root"))


@pytest.mark.parametrize("transcript", TRANSCRIPTS, ids=lambda t: t.id)
def test_transcript_prints_what_the_document_shows(transcript, root_view):
    problems = T.check(transcript, root_view)
    if problems:
        pytest.fail("\n\n".join(problems), pytrace=False)


@pytest.mark.parametrize("doc", DOCS)
def test_every_document_has_its_transcripts_and_says_so(doc):
    found = T.transcripts(doc)
    assert len(found) >= DOCS[doc], [t.id for t in found]
    head = "\n".join((ROOT / doc).read_text().splitlines()[:12])
    assert "tests/test_readme.py" in head, f"{doc}: no note on the transcript convention"


def test_a_changed_number_in_a_transcript_fails(root_view):
    """The Quick start's device time, edited by one digit, no longer matches."""
    quick = next(t for t in TRANSCRIPTS if t.doc == "README.md")
    out = T.run(quick.steps[-1].command, root_view)
    expected = quick.steps[-1].expected
    assert T.compare(expected, out.stdout.splitlines(), quick.varies) is None
    k = next(i for i, ln in enumerate(expected) if re.search(r"\d+ us", ln))
    edited = list(expected)
    edited[k] = re.sub(r"(\d+) us", lambda m: f"{int(m.group(1)) + 1} us", edited[k], count=1)
    why = T.compare(edited, out.stdout.splitlines(), quick.varies)
    assert why and edited[k] in why and expected[k] in why, why


def test_the_comparison_convention():
    varies = [re.compile(r"in (\d+\.\d+) s$"), re.compile(r"^(?!device)\w+( +[\d.]+)$")]
    actual = ["/home/me/x/seven.png: seven", "a", "b", "c", "compiled in 0.18 s",
              "wall      10.123", "device   0.015", "end"]
    assert T.compare(["/…/seven.png: seven", "...", "compiled in 9.99 s", "wall 1.0",
                      "device   0.015", "end"], actual, varies) is None
    assert T.compare(["…/seven.png: seven", "    …", "end"], actual, varies) is None
    # a deterministic number (the device row) must match exactly
    why = T.compare(["/…/seven.png: seven", "...", "device   0.016", "end"], actual, varies)
    assert "document line 3: 'device   0.016'" in why and "'device   0.015'" in why
    # a varying token must still be there, and in its place
    assert T.compare(["…", "compiled in 0.18 s (cached)", "…"], actual, varies)
    # missing and extra lines
    assert "ended" in T.compare(["…", "end", "more"], actual, varies)
    assert "goes on" in T.compare(["/…/seven.png: seven", "a"], actual, varies)
    # "..." inside a line is literal; only a line of it elides
    assert T.compare(["/…/seven.png: seven", "a ... c", "…"], actual, varies)


def test_transcript_commands_are_the_checkouts():
    """Console scripts run as the modules pyproject.toml installs them from; pip is
    skipped; anything else is refused."""
    scripts = dict(re.findall(r'^(dvsdk[\w-]*) = "([\w.]+):\w+"$',
                              (ROOT / "pyproject.toml").read_text(), re.M))
    assert scripts == T.SCRIPTS
    assert T.argvs("python3 -m pip install -e . && dvsdk-run a.bin b.png") == [
        ({}, [sys.executable, "-m", "dvsdk.cli.run", "a.bin", "b.png"])]
    assert T.argvs("DVSDK_NATIVE=0 python3 x.py -n 2  # note") == [
        ({"DVSDK_NATIVE": "0"}, [sys.executable, "x.py", "-n", "2"])]
    with pytest.raises(ValueError):
        T.argvs("rm -rf /")
