"""A net.bin's program as a schedule over the activation arena.

The runtime runs META ``program`` in order, with every device tensor at its arena offset
(netbin.md, "Metadata").  :func:`check_schedule` follows that order once and requires
what makes the result the network's:

* every value exists before a step uses it: a constant, a network input (uploaded before
  the first step), or a tensor an earlier step wrote; a device tensor may also be made of
  several written ones (a zero-copy concat's members);
* every tensor is written once: by the host (network inputs), by one command
  (``command_outputs``) or by one CPU step (a program that runs a step twice writes its
  outputs twice);
* the bytes a step reads still hold what it names: each byte of a device tensor was last
  written by that tensor or by one it contains or is contained in (the same H and W, at
  an 8-channel chunk; or a view named after it, :mod:`.views`: a band's strip, a group's
  channels, a sample), never by another tensor sharing its arena slot since;
* each command's named tensors are its buffers: ``command_inputs`` are the tensors at its
  input and element-wise operand, ``command_outputs`` lie in its output (bytes it writes
  beyond them hold nothing a later step may read);
* every tensor the CPU uploads (an input, a CPU step's result) is read by a command.

A device tensor of N samples (META ``batch``) is N copies of its (H, W, C) layout back to
back; a command of batch N reads and writes each of its buffers as N samples one sample's
size of that buffer apart (§4.10): its input and element-wise operand, and its output, whose
sample holds every run that writes DRAM.  A tensor it reads or writes must have the same N
and lie at the same stride (:class:`Piece`).

The work is linear in the program: each step looks at its own tensors, and the arena's
owners are kept as sorted disjoint byte ranges (:class:`Owners`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from ..errors import NetFileError
from .views import Placement, shares


def extent(place: Placement) -> int:
    """Bytes a placed tensor covers: N samples of (H, W, C) FP16 back to back."""
    _, (h, w, c), n = place
    return 2 * h * w * c * n


def _fail(path: str, what: str, value: Any = None, limit: Any = None) -> NoReturn:
    raise NetFileError(f"net.bin {path} {what}", field=path, value=value, limit=limit)


@dataclass(frozen=True)
class Piece:
    """Channels ``c`` of an (H, W) tensor a command reads or writes at arena ``base``, for
    ``n`` samples ``stride`` bytes apart (§4.10; 0: its own size, back to back)."""

    base: int
    h: int
    w: int
    c: int
    n: int = 1
    stride: int = 0

    @property
    def step(self) -> int:
        """Bytes from one sample to the next."""
        return self.stride or 2 * self.h * self.w * self.c

    @property
    def end(self) -> int:
        """The end of the last sample's bytes."""
        return self.base + (self.n - 1) * self.step + 2 * self.h * self.w * self.c

    def holds(self, off: int, hwc: tuple[int, int, int], n: int = 1) -> bool:
        """Whether a tensor of ``n`` samples (back to back) at ``off`` of shape ``hwc`` is
        this piece or a chunk-aligned channel slice of it, in the same chunked layout (§1)
        and with the same samples at the same stride."""
        h, w, c = hwc
        if n != self.n or (n > 1 and 2 * h * w * c != self.step):
            return False
        if (self.h, self.w) == (1, 1) and off == self.base and h * w * c == self.c:
            return True   # a 1x1xC command (a flattening FC) reads the tensor's bytes in place
        rel, plane = off - self.base, 2 * h * w
        if (h, w) != (self.h, self.w) or rel < 0 or rel % (8 * plane):
            return False
        c0 = rel // plane
        return c0 + c <= self.c and (c % 8 == 0 or c0 + c == self.c)


@dataclass
class Access:
    """The arena pieces one command reads and writes; ``inputs`` are its operands in the
    order of ``command_inputs`` (the input, None for a uint8 one; the element-wise one)."""

    reads: list[Piece]
    writes: list[Piece]
    inputs: list[Piece | None] = field(default_factory=list)


def merge(pieces: Iterable[Piece]) -> list[Piece]:
    """The pieces, and every run of pieces back to back along C (the runs of one command,
    §4.1, or the producers of a zero-copy concat) read as one tensor, where every non-last
    piece fills whole 8-channel chunks.  An arena slot holds different tensors at different
    times, so several pieces may start at one address: each continuation is followed
    (a greedy merge of the first one missed e.g. a concat of 64 + 80 channels whose second
    slot earlier held a 64-channel tensor)."""
    uniq = sorted(set(pieces), key=lambda p: (p.base, p.h, p.w, p.c, p.n, p.stride))
    starts: dict[tuple[int, int, int, int, int], list[Piece]] = {}
    for p in uniq:
        starts.setdefault((p.base, p.h, p.w, p.n, p.step if p.n > 1 else 0), []).append(p)
    out = set(uniq)
    for first in uniq:
        stack = [(first.c, first)]
        while stack:
            total, last = stack.pop()
            if last.c % 8:
                continue  # a partial chunk ends the run
            # (samples: the runs of one command, each sample's runs one after another)
            nxt = (last.base + 2 * last.h * last.w * last.c, last.h, last.w, last.n,
                   last.step if last.n > 1 else 0)
            for q in starts.get(nxt, ()):
                merged = Piece(first.base, q.h, q.w, total + q.c, q.n,
                               q.step if q.n > 1 else 0)
                if merged not in out:  # the same start and end: the same continuations
                    out.add(merged)
                    stack.append((total + q.c, q))
    return sorted(out, key=lambda p: (p.base, p.h, p.w, p.c, p.n, p.stride))


def same(piece: Piece | None, place: Placement) -> bool:
    """Whether a tensor placed at ``place`` is exactly the bytes of ``piece``."""
    off, (h, w, c), n = place
    return (piece is not None and piece.base == off and piece.h * piece.w * piece.c == h * w * c
            and piece.holds(off, (h, w, c), n))


def _piece(place: Placement) -> Piece:
    off, (h, w, c), n = place
    return Piece(off, h, w, c, n)


def related(a: Placement, b: Placement) -> bool:
    """Whether one of two device tensors is the other or a chunk-aligned channel slice of
    it in the same layout (a concat member, a split part, a 1x1 view)."""
    return _piece(a).holds(*b) or _piece(b).holds(*a)


class PieceIndex:
    """Answers "does any of these pieces hold a tensor?" without a pass over the pieces:
    by (H, W, base), walking back one 8-channel chunk at a time."""

    def __init__(self, pieces: Iterable[Piece]) -> None:
        self._at: dict[tuple[int, int, int], set[Piece]] = {}
        self._most: dict[tuple[int, int], int] = {}
        for p in pieces:
            self._at.setdefault((p.h, p.w, p.base), set()).add(p)
            self._most[p.h, p.w] = max(self._most.get((p.h, p.w), 0), p.c)

    def holds(self, place: Placement) -> bool:
        off, (h, w, c), n = place
        flat = self._at.get((1, 1, off))
        if flat and any(p.holds(off, (h, w, c), n) for p in flat):
            return True   # (Piece.holds: a 1x1xC command reads the tensor in place)
        chunk = 16 * h * w
        for m in range(0, max(self._most.get((h, w), 0) - c, -1) // 8 + 1):
            ps = self._at.get((h, w, off - m * chunk))
            if ps and any(p.holds(off, (h, w, c), n) for p in ps):
                return True
        return False


class Owners:
    """Which tensor last wrote each byte of the arena: sorted, disjoint byte ranges."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.names: list[str] = []

    def write(self, a: int, b: int, name: str) -> None:
        """``[a, b)`` now holds ``name``."""
        if a >= b:
            return
        i = bisect_right(self.ends, a)          # the first range that ends after a
        j = bisect_left(self.starts, b, i)      # the first that starts at or after b
        s, e, n = [a], [b], [name]
        if i < j and self.starts[i] < a:        # the part of the first before a
            s.insert(0, self.starts[i])
            e.insert(0, a)
            n.insert(0, self.names[i])
        if i < j and self.ends[j - 1] > b:      # the part of the last after b
            s.append(b)
            e.append(self.ends[j - 1])
            n.append(self.names[j - 1])
        self.starts[i:j], self.ends[i:j], self.names[i:j] = s, e, n

    def within(self, a: int, b: int) -> list[tuple[int, int, str]]:
        """The ranges that overlap ``[a, b)``, clipped to it, in order."""
        i = bisect_right(self.ends, a)
        j = bisect_left(self.starts, b, i)
        return [(max(self.starts[k], a), min(self.ends[k], b), self.names[k])
                for k in range(i, j)]


@dataclass
class _State:
    """The walk through the program: who wrote what, and where."""

    dev: dict[str, Placement]
    constants: dict[str, Any]
    owners: Owners = field(default_factory=Owners)
    writer: dict[str, str] = field(default_factory=dict)    # tensor -> the path that wrote it
    uploads: dict[str, str] = field(default_factory=dict)   # device tensors the CPU wrote
    read_by_command: set[str] = field(default_factory=set)  # owners a command read

    def write(self, t: str, path: str, upload: bool) -> None:
        first = self.writer.get(t)
        if first is not None:
            _fail(path, f"writes {t} a second time (first: {first})", t, "each tensor written "
                  "once")
        self.writer[t] = path
        place = self.dev.get(t)
        if place is not None:
            self.owners.write(place[0], place[0] + extent(place), t)
            if upload:
                self.uploads[t] = path

    def need(self, t: str, path: str, command: bool) -> None:
        """``t`` has its value when ``path`` reads it (module docstring)."""
        if t in self.constants:
            return
        place = self.dev.get(t)
        if place is None:
            if t not in self.writer:
                _fail(path, "has no value when the step runs (nothing wrote it before)", t)
            return
        off = place[0]
        pos, end = off, off + extent(place)
        spans = self.owners.within(off, end)
        mine = [owner == t or (owner in self.dev and (related(place, self.dev[owner])
                                                       or shares(t, owner, self.dev)))
                for _, _, owner in spans]
        if not any(mine):
            _fail(path, f"reads {t} before anything wrote it", t, "produced before use")
        for (s, e, owner), ok in zip(spans, mine):
            if s > pos:
                break
            if not ok:
                by = self.writer.get(owner, owner)
                _fail(path, f"reads {t}, whose arena bytes {s}..{e} were overwritten by "
                      f"{owner} ({by}) since", t, "intact until its last reader")
            if command:
                self.read_by_command.add(owner)
            pos = e
        if pos < end:
            _fail(path, f"reads {t} before all of it is written (arena bytes {pos}..{end})",
                  t, "produced before use")


def check_schedule(meta: dict[str, Any], dev: dict[str, Placement], access: list[Access]
                   ) -> None:
    """META's program as a schedule (module docstring); ``dev`` places the device tensors
    and ``access`` lists each CMDS record's buffers (:func:`.records.command_access`).  The
    program's structure is checked already (:func:`dvsdk.netprogram.check_program`)."""
    st = _State(dev, meta.get("constants") or {})
    for j, spec in enumerate(meta["inputs"]):
        st.write(spec["tensor"], f"inputs[{j}]", upload=True)
    for i, step in enumerate(meta["program"]):
        path = f"program[{i}]"
        if step["kind"] == "cpu":
            for j, t in enumerate(step["inputs"]):
                if t:
                    st.need(t, f"{path}.inputs[{j}]", command=False)
            for j, t in enumerate(step["outputs"]):
                if t:
                    st.write(t, f"{path}.outputs[{j}]", upload=True)
            continue
        first, count = step["commands"]
        for j in range(count):
            _command(st, access[first + j], first + j, step, j, path)
    for j, spec in enumerate(meta["outputs"]):
        st.need(spec["tensor"], f"outputs[{j}].tensor", command=False)
    for t, path in st.uploads.items():
        if t not in st.read_by_command:
            _fail(path, f"uploads {t} to the device where no command reads it", t)


def _command(st: _State, acc: Access, k: int, step: dict, j: int, path: str) -> None:
    """Command ``j`` of a hw step (CMDS record ``k``): its named inputs are its buffers and
    have their values; its output bytes go to its named outputs."""
    names = step["command_inputs"][j]
    ipath = f"{path}.command_inputs[{j}]"
    if len(names) != len(acc.inputs):
        _fail(ipath, f"does not name CMDS[{k}]'s operands (input, then the element-wise "
              "one)", names, len(acc.inputs))
    for t, piece in zip(names, acc.inputs):
        if piece is not None and not (t in st.dev and same(piece, st.dev[t])):
            _fail(ipath, f"names {t}, which is not where CMDS[{k}] reads (offset, H, W, C, "
                  "batch)", list(st.dev.get(t, ())),
                  [piece.base, [piece.h, piece.w, piece.c], piece.n])
        st.need(t, ipath, command=True)
    outs = step["command_outputs"][j]
    opath = f"{path}.command_outputs[{j}]"
    outs = [outs] if isinstance(outs, str) else outs
    if acc.writes:   # bytes the command writes beyond its named outputs hold no value
        st.owners.write(min(p.base for p in acc.writes), max(p.end for p in acc.writes),
                        f"(CMDS[{k}] output)")
    for t in outs:
        if t not in st.dev or not any(p.holds(*st.dev[t]) for p in acc.writes):
            _fail(opath, f"names {t}, which is not in CMDS[{k}]'s output (offset, H, W, C, "
                  "batch)", list(st.dev.get(t, ())))
        st.write(t, opath, upload=False)


__all__ = ["Access", "Owners", "Piece", "PieceIndex", "check_schedule", "merge", "related",
           "same"]
