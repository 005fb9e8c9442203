"""Where ``dvsdk eval`` runs its chunks, and what it does when a worker is lost.

Three runners share one :class:`Work` ledger (what is left, what each image has been
through):

* **devices** (a board farm, or the one local device): one thread per device. A device
  error stops its chunk; the image that was running is retried elsewhere, the rest of the
  chunk goes back to the queue. A device that fails ``max_failures`` times in a row (the
  net cannot load, or a run fails) leaves the rotation with one warning.
* **processes** (``--jobs N``): N simulator processes, each fed one chunk at a time over a
  pipe, so a process that dies (SIGKILL, out of memory) is known with its chunk: the chunk
  is resubmitted and the process replaced; a slot whose process dies ``max_failures``
  times in a row is given up.
* **Dask**: the scheduler already resubmits a lost worker's tasks; a task that killed
  workers too often (``KilledWorker``) is split into single images; with no worker at all
  for ``worker_timeout`` seconds the remaining images fail, naming why.

An image that was lost ``max_failures`` times fails with the reason; a chunk lost twice is
split into single images so one bad image cannot take its neighbours with it. When no
worker is left, every remaining image fails with the reason: every image ends up scored or
failed, and nothing scored is thrown away.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from multiprocessing import get_context
from multiprocessing.connection import wait as mp_wait
from typing import Any

from .evalwork import ChunkOut, Row, Worker, process_main, reason

Chunk = list  # [(index, Sample), ...]
CHUNK_MAX = 64


def chunk_size(n: int, workers: int) -> int:
    """About four chunks per worker, so none sits idle at the end: ceil(n / (4 w)),
    clamped to 1..64."""
    return max(1, min(CHUNK_MAX, math.ceil(n / (4 * max(workers, 1)))))


def split(items: list, workers: int) -> list[Chunk]:
    size = chunk_size(len(items), workers)
    return [items[i:i + size] for i in range(0, len(items), size)]


class Work:
    """The chunks left to run and each image's losses; ``emit`` receives finished rows
    (thread-safe: device threads call in)."""

    def __init__(self, chunks: list[Chunk], max_failures: int,
                 emit: Callable[[list[Row], Any], None], warn: Callable[[str], None]):
        self.todo: deque[Chunk] = deque(chunks)
        self.max_failures = max_failures
        self.tries: dict[int, int] = {}
        self.lost_on: dict[int, set[str]] = {}
        self.running = 0
        self.cond = threading.Condition()
        self._emit, self.warn = emit, warn

    def emit(self, rows: list[Row], total: Any = None) -> None:
        with self.cond:
            self._emit(rows, total)

    def take(self, who: str, alone: bool = True, block: bool = False) -> Chunk | None:
        """The next chunk for ``who``, preferring one it has not lost before (unless it is
        the only worker left); None when nothing is left (``block``: wait while other
        workers still run chunks that may come back)."""
        with self.cond:
            while True:
                i = next((j for j, c in enumerate(self.todo)
                          if alone or who not in self.lost_on.get(c[0][0], ())), -1)
                if i < 0 and self.todo and not self.running:
                    i = 0   # only chunks ``who`` lost, and no other worker busy: retry
                if i >= 0:
                    chunk = self.todo[i]
                    del self.todo[i]
                    self.running += 1
                    return chunk
                if not block or (not self.todo and not self.running):
                    return None
                self.cond.wait(0.2)

    def finished(self, chunk: Chunk, out: ChunkOut, who: str) -> None:
        """``out`` came back for ``chunk``: keep its rows; where the device stopped, the
        running image is lost and the rest goes back to the queue."""
        with self.cond:
            self.running -= 1
            self._emit(out.rows, out.total)
            if out.stopped_at is not None:
                rest = chunk[out.stopped_at + 1:]
                if rest:
                    self.todo.appendleft(rest)
                self._lost([chunk[out.stopped_at]], out.why, who)
            self.cond.notify_all()

    def lost(self, chunk: Chunk, why: str, who: str, isolate: bool = False) -> None:
        """``chunk`` ran on ``who`` and was lost with it (no rows came back); ``isolate``:
        run its images one by one from now on (it was already retried elsewhere)."""
        with self.cond:
            self.running -= 1
            self._lost(chunk, why, who, isolate)
            self.cond.notify_all()

    def give_back(self, chunk: Chunk) -> None:
        """``chunk`` never ran (its worker could not start)."""
        with self.cond:
            self.running -= 1
            self.todo.appendleft(chunk)
            self.cond.notify_all()

    def _lost(self, chunk: Chunk, why: str, who: str, isolate: bool = False) -> None:
        again, failed = [], []
        for item in chunk:
            index = item[0]
            self.tries[index] = n = self.tries.get(index, 0) + 1
            self.lost_on.setdefault(index, set()).add(who)
            if n >= self.max_failures:
                failed.append((index, None, f"{why} (lost {n} times)"))
            else:
                again.append(item)
        if failed:
            self._emit(failed, None)
        if not again:
            return
        if len(again) > 1 and (isolate or any(self.tries[i[0]] > 1 for i in again)):
            self.todo.extend([item] for item in again)     # isolate a bad image
        else:
            self.todo.append(again)

    def fail_rest(self, why: str) -> None:
        """No worker is left: every image not yet run fails with ``why``."""
        with self.cond:
            rows = [(item[0], None, why) for chunk in self.todo for item in chunk]
            self.todo.clear()
            if rows:
                self._emit(rows, None)
            self.cond.notify_all()


# -- devices: one thread each ------------------------------------------------------------

def on_devices(urls: list[str | None], net_bytes: bytes, args: tuple, work: Work,
               max_failures: int) -> list[str]:
    """One thread per device, each taking the next chunk; a device failing
    ``max_failures`` times in a row leaves (see the module docstring)."""
    names = [u or _default_url() for u in urls]
    alive = set(names)
    lock = threading.Lock()

    def serve(url: str | None, name: str) -> None:
        worker: Worker | None = None
        fails, why = 0, ""
        try:
            while True:
                chunk = work.take(name, alone=len(alive) == 1, block=True)
                if chunk is None:
                    return
                if worker is None:
                    try:
                        worker = Worker(net_bytes, url, *args)
                    except Exception as e:  # noqa: BLE001 - this device cannot run the net
                        work.give_back(chunk)
                        fails, why = fails + 1, reason(e)
                        if fails >= max_failures and _leave(name, fails, why):
                            return
                        time.sleep(min(0.02 * 2 ** fails, 0.5))
                        continue
                out = worker.predict(chunk)
                work.finished(chunk, out, name)
                if out.stopped_at is None:
                    fails = 0
                    continue
                fails = (0 if out.rows else fails) + 1
                why = out.why
                worker.close()
                worker = None
                if fails >= max_failures and _leave(name, fails, why):
                    return
        finally:
            if worker is not None:
                worker.close()

    def _leave(name: str, fails: int, why: str) -> bool:
        with lock:
            alive.discard(name)
            last = not alive
        work.warn(f"{name} failed {fails} times in a row ({why}); it leaves the rotation"
                  + ("" if last else ", its images run on the other devices"))
        if last:
            work.fail_rest(f"no device left to run it: the last, {name}, failed {fails} "
                           f"times in a row ({why})")
        with work.cond:
            work.cond.notify_all()
        return True

    if len(urls) == 1:
        serve(urls[0], names[0])
    else:
        threads = [threading.Thread(target=serve, args=(u, n), daemon=True,
                                    name=f"dvsdk-eval {n}") for u, n in zip(urls, names)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return names


def _default_url() -> str:
    import os

    return os.environ.get("DVSDK_DEVICE") or "sim://"


# -- processes: a pipe each, so a death is known with its chunk -------------------------

def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with status {exitcode}"


def on_processes(jobs: int, net_bytes: bytes, url: str | None, args: tuple, work: Work,
                 max_failures: int) -> list[str]:
    """``jobs`` simulator processes; a dead one is replaced and its chunk resubmitted."""
    ctx = get_context("spawn")
    slots: list[dict[str, Any]] = [{"fails": 0, "proc": None, "chunk": None}
                                   for _ in range(jobs)]

    def start(slot: dict[str, Any]) -> None:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=process_main, args=(child, net_bytes, url, args),
                           daemon=True, name=f"dvsdk-eval process {slots.index(slot)}")
        proc.start()
        child.close()
        slot.update(proc=proc, conn=parent, chunk=None, ready=False)

    def retire(k: int, slot: dict[str, Any], why: str) -> None:
        slot["proc"] = None
        work.warn(f"process {k} failed {slot['fails']} times in a row ({why}); given up")
        if all(s["proc"] is None for s in slots):
            work.fail_rest(f"no worker process left: the last failed {slot['fails']} "
                           f"times in a row ({why})")

    def failed(k: int, slot: dict[str, Any], why: str) -> None:
        """The process of ``slot`` is gone (or could not load the net)."""
        if slot["chunk"] is not None:
            work.warn(f"{why} while scoring {len(slot['chunk'])} image(s); they are "
                      "resubmitted")
            work.lost(slot["chunk"], why, f"process {k}")
        slot["conn"].close()
        slot["proc"].join(1.0)
        slot["fails"] += 1
        if slot["fails"] >= max_failures:
            retire(k, slot, why)
        else:
            start(slot)

    for slot in slots:
        start(slot)
    try:
        while True:
            live = [(k, s) for k, s in enumerate(slots) if s["proc"] is not None]
            for k, s in live:
                if s["ready"] and s["chunk"] is None:
                    s["chunk"] = work.take(f"process {k}")   # processes are alike
                    if s["chunk"] is not None:
                        try:
                            s["conn"].send(s["chunk"])
                        except OSError:   # it died since "ready": its death says how
                            s["proc"].join(1.0)
                            failed(k, s, f"worker process {k} "
                                         f"{_death(s['proc'].exitcode)}")
            if not live or not work.todo and all(s["chunk"] is None for _, s in live):
                break
            waitables = {}
            for k, s in live:
                waitables[s["conn"]] = (k, s)
                waitables[s["proc"].sentinel] = (k, s)
            for ready in mp_wait(list(waitables), timeout=1.0):
                k, s = waitables[ready]
                if s["proc"] is None or s["conn"].closed:
                    continue
                _serve_message(k, s, work, failed)
    finally:
        for s in slots:
            if s["proc"] is not None:
                try:
                    s["conn"].send(None)
                except OSError:
                    pass
        for s in slots:
            if s["proc"] is not None:
                s["proc"].join(5.0)
                if s["proc"].is_alive():
                    s["proc"].kill()
                    s["proc"].join(1.0)
    return [f"process {k} on {url or 'sim://'}" for k in range(jobs)]


def _serve_message(k: int, s: dict[str, Any], work: Work,
                   failed: Callable[[int, dict[str, Any], str], None]) -> None:
    """Everything process ``k`` has sent; its death once it has nothing more."""
    conn = s["conn"]
    while True:
        try:
            if not conn.poll():
                if s["proc"].is_alive():
                    return
                raise EOFError
            kind, body = conn.recv()
        except (EOFError, OSError):
            s["proc"].join(1.0)
            failed(k, s, f"worker process {k} {_death(s['proc'].exitcode)}")
            return
        if kind == "ready":
            s["ready"] = True
        elif kind == "failed":            # the net could not load (never with a chunk)
            failed(k, s, body)
            return
        else:
            chunk, s["chunk"] = s["chunk"], None
            work.finished(chunk, body, f"process {k}")
            if body.stopped_at is None:
                s["fails"] = 0
