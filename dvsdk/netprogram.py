"""A net.bin's program (META ``program``): its steps' structure and how it alternates.

:func:`check_program` is the part of :func:`dvsdk.netfile.check` that reads the program
without the command decoder: at most ``program_steps`` steps, each a typed ``hw`` or
``cpu`` step; every ``CMDS`` record run by exactly one ``hw`` step (a record run twice
would write its output twice, one run by none is dead weight the loader would still
validate), and every command naming the tensors it reads and writes
(``command_inputs``, ``command_outputs``).  Whether the steps form a schedule (every
value produced before it is used, written once, intact in the arena when read) needs the
commands' buffers: :mod:`dvsdk.runtime.schedule`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from .hw.spec import SPEC

#: the program's bounds (netbin.yaml ``meta_limits``)
MAX_STEPS = int(SPEC.netbin["meta_limits"]["program_steps"])


class Reader(Protocol):
    """What :class:`dvsdk.netfile.MetaReader` offers (typed reads that fail with the path)."""

    def fail(self, path: str, what: str, value: Any = None, limit: Any = None) -> Any: ...
    def obj(self, v: Any, path: str) -> dict[str, Any]: ...
    def lst(self, v: Any, path: str) -> list[Any]: ...
    def integer(self, v: Any, path: str, lo: int = 0, hi: int | None = None) -> int: ...
    def text(self, v: Any, path: str, choices: tuple[str, ...] | None = None) -> str: ...
    def names(self, v: Any, path: str) -> list[str]: ...


def check_program(m: Reader, program: Any, ncmd: int, tensors: dict, constants: dict
                  ) -> None:
    """The steps of META ``program`` over ``ncmd`` CMDS records (module docstring)."""
    steps = m.lst(program, "program")
    if len(steps) > MAX_STEPS:
        m.fail("program", "has too many steps", len(steps), MAX_STEPS)
    run_by: dict[int, int] = {}   # CMDS record -> the step that runs it
    for i, step in enumerate(steps):
        path = f"program[{i}]"
        step = m.obj(step, path)
        kind = m.text(step.get("kind"), f"{path}.kind", ("hw", "cpu"))
        if "name" in step:
            m.text(step["name"], f"{path}.name")
        if kind == "hw":
            _check_hw(m, step, path, i, ncmd, run_by, (tensors, constants))
            continue
        m.text(step.get("op"), f"{path}.op")
        m.obj(step.get("attrs"), f"{path}.attrs")   # required: a lost key would mean defaults
        for j, t in enumerate(m.names(step.get("inputs"), f"{path}.inputs")):
            if t and t not in tensors and t not in constants:
                m.fail(f"{path}.inputs[{j}]", "names no tensor or constant", t)
        for j, t in enumerate(m.names(step.get("outputs"), f"{path}.outputs")):
            if t and t not in tensors:
                m.fail(f"{path}.outputs[{j}]", "names no tensor", t)
    if len(run_by) < ncmd:
        k = next(k for k in range(ncmd) if k not in run_by)
        m.fail(f"CMDS[{k}]", "is run by no hw step", k, "each record in one hw step")


def _check_hw(m: Reader, step: dict, path: str, i: int, ncmd: int, run_by: dict[int, int],
              known: tuple[dict, ...]) -> None:
    cmds = m.lst(step.get("commands"), f"{path}.commands")
    if len(cmds) != 2:
        m.fail(f"{path}.commands", "is not [first, count]", cmds, 2)
    first = m.integer(cmds[0], f"{path}.commands[0]")
    count = m.integer(cmds[1], f"{path}.commands[1]", 1)
    if first + count > ncmd:
        m.fail(f"{path}.commands", "refers to missing commands (past the end of CMDS)",
               cmds, f"{ncmd} records")
    for k in range(first, first + count):   # (at most ncmd in all: a repeat fails here)
        if k in run_by:
            m.fail(f"{path}.commands", f"runs CMDS[{k}] again (program[{run_by[k]}] runs "
                   "it already)", cmds, "each record in one hw step")
        run_by[k] = i
    m.names(step.get("runs", []), f"{path}.runs")
    m.names(step.get("sources", []), f"{path}.sources")
    for j, src in enumerate(m.lst(step.get("command_sources", []),
                                  f"{path}.command_sources")):
        m.names(src, f"{path}.command_sources[{j}]")
    _per_command(m, step.get("command_outputs"), f"{path}.command_outputs", count, known,
                 lambda x, p: [x] if isinstance(x, str) else m.names(x, p))
    _per_command(m, step.get("command_inputs"), f"{path}.command_inputs", count, known,
                 m.names)


def _per_command(m: Reader, values: Any, path: str, count: int, known: tuple[dict, ...],
                 names: Any) -> None:
    """``command_outputs`` / ``command_inputs``: one entry per command, each naming
    tensors the program has (what the schedule check follows)."""
    if values is None:
        m.fail(path, "is missing (the tensors each command reads and writes)", None,
               f"{count} entries")
    values = m.lst(values, path)
    if len(values) != count:
        m.fail(path, "needs one entry per command", len(values), count)
    for j, v in enumerate(values):
        for t in names(v, f"{path}[{j}]"):
            if not any(t in k for k in known):
                m.fail(f"{path}[{j}]", "names no tensor", t)


@dataclass(frozen=True)
class ProgramShape:
    """How a program alternates between the DV700 and the CPU (META ``program``)."""

    hw_segments: int
    cpu_steps: int
    cpu_segments: int   # runs of consecutive CPU steps
    transitions: int    # device <-> CPU hand-overs between consecutive steps

    def __str__(self) -> str:
        if not self.cpu_steps:
            return (f"no CPU steps: {self.hw_segments} hardware segment"
                    f"{'s' if self.hw_segments != 1 else ''}, no device<->CPU transitions")
        return (f"{self.cpu_steps} CPU step{'s' if self.cpu_steps != 1 else ''} in "
                f"{self.cpu_segments} segment{'s' if self.cpu_segments != 1 else ''}, "
                f"{self.transitions} device<->CPU transition"
                f"{'s' if self.transitions != 1 else ''}")


def program_shape(meta: dict[str, Any]) -> ProgramShape:
    """Count the hardware segments, CPU steps, CPU segments and transitions of META's
    program (the hand-overs between consecutive steps; the input upload and the output
    download of every run are not counted)."""
    kinds = [s.get("kind") for s in meta.get("program", [])]
    starts = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
    return ProgramShape(hw_segments=starts.count("hw"), cpu_steps=kinds.count("cpu"),
                        cpu_segments=starts.count("cpu"),
                        transitions=max(len(starts) - 1, 0))
