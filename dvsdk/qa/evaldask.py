"""``dvsdk eval --scheduler``: chunks as tasks of a Dask distributed cluster.

The net travels as a worker plugin (:class:`NetUpload`): the scheduler keeps it and hands
it to every worker that joins, so a worker that replaces a lost one has the net too (data
scattered to workers dies with them). Each worker process loads the net once, on
``$DVSDK_DEVICE`` or ``sim://``.

Faults: the scheduler resubmits a lost worker's tasks by itself; a task that killed
workers too often (``KilledWorker``) is split into single images by :class:`.evalpools.Work`;
with no worker at all for ``worker_timeout`` seconds the images not yet scored fail with
that reason, and so do they when the scheduler itself goes away.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from distributed import Client, KilledWorker
from distributed import wait as dask_wait
from distributed.diagnostics.plugin import WorkerPlugin

from ..errors import InvalidArgument
from .evalpools import Chunk, Work, split
from .evalwork import ChunkOut, Worker, reason

_NETS: dict[str, bytes] = {}          # in each worker process: net.bin by SHA-256
_LOADED: dict[str, Worker] = {}
_LOCK = threading.Lock()


class NetUpload(WorkerPlugin):
    """Gives every worker, present or future, the net.bin's bytes."""

    def __init__(self, key: str, net_bytes: bytes) -> None:
        self.key, self.net_bytes = key, net_bytes
        self.name = f"dvsdk-eval-{key[:16]}"

    def setup(self, worker: Any) -> None:
        _NETS[self.key] = self.net_bytes

    def teardown(self, worker: Any) -> None:
        _NETS.pop(self.key, None)


def dask_chunk(chunk: Chunk, key: str, args: tuple) -> ChunkOut:
    """A chunk on a Dask worker, with the net loaded once per process (dropped when its
    device fails, so the next chunk opens it afresh).  A Dask worker runs tasks on several
    threads; they take turns on the one net (its ``last_run`` and a device failure are one
    chunk's), as a board is never shared."""
    name = key + "/" + "/".join(map(str, args))
    with _LOCK:
        loaded = _LOADED.get(name)
        if loaded is None:
            if key not in _NETS:
                raise InvalidArgument("this Dask worker has not received the net",
                                      field="net", value=key[:16])
            url = os.environ.get("DVSDK_DEVICE") or "sim://"
            loaded = _LOADED[name] = (Worker(_NETS[key], url, *args), threading.Lock())
    worker, turn = loaded
    with turn:
        if _LOADED.get(name) is not loaded:      # closed by a thread before this one
            return dask_chunk(chunk, key, args)
        out = worker.predict(chunk)
        if out.stopped_at is not None:
            with _LOCK:
                _LOADED.pop(name, None)
            worker.close()
    return out


def on_dask(scheduler: str, net_bytes: bytes, args: tuple, items: list,
            work_for: Callable[[list[Chunk]], Work], worker_timeout: float) -> list[str]:
    """Run ``items`` on the cluster at ``scheduler``; the names of the workers seen."""
    try:
        client = Client(scheduler, timeout=10)
    except (OSError, TimeoutError) as e:
        raise InvalidArgument(f"cannot reach the Dask scheduler: {e}", field="scheduler",
                              value=scheduler) from None
    except ValueError as e:          # distributed's address parser: "bogus", "tcp://[::1"
        raise InvalidArgument(f"not a Dask scheduler address: {e}", field="scheduler",
                              value=scheduler, limit="tcp://HOST:PORT") from None
    seen: set[str] = set()
    key = hashlib.sha256(net_bytes).hexdigest()
    with client:
        up = client.nthreads()
        work = work_for(split(items, len(up)))
        plugin = NetUpload(key, net_bytes)
        client.register_plugin(plugin, name=plugin.name)
        pending: dict[Any, Chunk] = {}
        lonely_since: float | None = None

        def submit_all() -> None:
            while (chunk := work.take("dask")) is not None:
                pending[client.submit(dask_chunk, chunk, key, args, pure=False)] = chunk

        try:
            submit_all()
            while pending:
                try:
                    done, _ = dask_wait(list(pending), timeout=1.0,
                                        return_when="FIRST_COMPLETED")
                except TimeoutError:
                    done = set()
                for f in done:
                    _collect(f, pending.pop(f), work)
                submit_all()
                now = client.nthreads()
                for gone in sorted(set(up) - set(now)):
                    work.warn(f"Dask worker {gone} left; its tasks are resubmitted")
                up = now
                seen.update(now)
                if now or not pending:
                    lonely_since = None
                    continue
                lonely_since = lonely_since or time.monotonic()
                if time.monotonic() - lonely_since >= worker_timeout:
                    work.warn(f"no Dask worker for {worker_timeout:g} s; giving up")
                    for f, chunk in pending.items():
                        work.give_back(chunk)
                        f.cancel()
                    pending.clear()
                    work.fail_rest(f"no Dask worker for {worker_timeout:g} s at {scheduler}")
        except (OSError, TimeoutError, RuntimeError) as e:   # the scheduler went away
            for chunk in pending.values():
                work.give_back(chunk)
            work.fail_rest(f"lost the Dask scheduler {scheduler}: {reason(e)}")
        finally:
            try:
                client.unregister_worker_plugin(plugin.name)
            except Exception:  # noqa: BLE001 - the scheduler may be gone
                pass
    return sorted(seen)


def _collect(f: Any, chunk: Chunk, work: Work) -> None:
    """A finished task: its rows, or its chunk lost (a killed worker, an error)."""
    if f.status == "finished":
        work.finished(chunk, f.result(), "dask")
    else:
        try:
            e = f.exception()
        except BaseException as cancelled:  # noqa: BLE001 - a cancelled future
            e = cancelled
        killed = isinstance(e, KilledWorker)   # the scheduler retried it already
        why = f"a Dask worker died while scoring it ({e})" if killed else reason(e)
        work.lost(chunk, why, "dask", isolate=killed)
    f.release()
