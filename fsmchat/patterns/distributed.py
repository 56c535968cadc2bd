"""Batches past one machine, on Ray (``pip install "fsmchat[ray]"``); Ray is imported only here.

``execute_batch(pattern, tasks, executor="ray")`` ships the pattern's config (``to_config``) to
one Ray actor per worker; each rebuilds it (``from_config``) and runs the chunks of tasks it is
handed concurrently with asyncio (``max_concurrency_per_worker`` at once). The driver hands out
chunks as workers free up, gathers per-task outcomes (a result or a ``TaskFailure``), re-queues the
chunks of a worker that died on a live one, keeps the first outcome per task, and returns results
in task order. With ``checkpoint_dir`` each worker checkpoints its runs in its own SQLite file
there, under a run id derived from the config, the task's index and the task, so a re-run finds
the finished runs (in any worker's file) and rebuilds their results without a model call, and
continues the unfinished ones from their last committed step. ``checkpoint_dir`` may instead be a
PostgreSQL URI (``postgresql://...``): then every worker, on any machine, writes to that one store,
and a chunk re-queued from a dead worker continues its runs there (the dead worker's leases are
taken over at once on its own machine, after ``lease_ttl`` from another).
``executor="local"`` runs the same shard runner in this process (no Ray).

Rate limits set in the driver (``fsmchat.rate_limit(target, RateLimit(...))``) are shared by the
whole Ray batch: each is held by one Ray actor (``SharedWindow``, one clock), and every worker's
requests to its target reserve room there, waiting (a ``rate_limited`` event in the run) instead
of each worker spending a limit of its own.
Workers rebuild the config with ``from_config(config, trusted=True)``: it is made by the driver's
``to_config()`` from the caller's own pattern object, never read from outside, so the caller has
already trusted every reference in it (including a ``__main__`` script's ``path.py:name``).
"""
from __future__ import annotations

import asyncio
import hashlib
import math
import os
import sys
import time
import traceback
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Protocol, Sequence, TypedDict, TypeGuard, Union

from ..checks import check_tasks
from ..config.convert import PatternSpec, config_digest, from_config, to_config
from ..engine import run_sync
from ..errors import CheckpointStoreError, FsmchatError, attach_result, result_of
from ..common.masking import redact, redact_chain
from ..models import RunResult
from .progress import ProgressBar
from ..speakers.llm import REQUESTS
from ..speakers.providers import get_litellm
from ..speakers.ratelimit import RateLimit, limits, rate_limit, wait_for_room
from ..store.checkpoint import DEFAULT_COMMIT, Checkpointer, RunInfo, SqliteCheckpointer, check_commit
from ..store.postgres import PostgresCheckpointer

RAY_MISSING = 'executor="ray" needs Ray: pip install "fsmchat[ray]"'
Item = tuple[int, str, str | None, str | None, bool]  # (index, task, run_id, resume_from, finished)


class ListedStore(Checkpointer, Protocol):
    """A store that lists its runs (``SqliteCheckpointer``, ``MemoryCheckpointer``, ...): a local batch's own."""

    def list_runs(self) -> list[RunInfo]: ...


CheckpointDir = Union[str, Path, ListedStore]
"""Where a batch checkpoints: a folder (one SQLite file per worker), a PostgreSQL URI, or (locally) a store."""


class BatchPattern(Protocol):
    """What a batch runs of its pattern (``Pattern`` has all of it)."""

    def preflight(self, tasks: Sequence[str], /, *, credentials: bool = True) -> None: ...

    def aexecute(self, task: str, /, *, checkpoint: Checkpointer | None = None, run_id: str | None = None,
                 commit: str = DEFAULT_COMMIT) -> Awaitable[RunResult]: ...

    def aresume(self, run_id: str, checkpoint: Checkpointer, /) -> Awaitable[RunResult]: ...


class TaskFailure(FsmchatError):
    """What a failed task leaves in its slot of a batch's results: the error's type, message and
    traceback (as text, so it crosses processes), the transcript so far and the run id."""

    def __init__(self, index: int, task: str, error_type: str, message: str, traceback: str = "",
                 transcript: list[dict[str, object]] | None = None, stop_reason: str | None = None,
                 run_id: str | None = None, worker: str | None = None):
        message, traceback = redact(message), redact(traceback)  # what crosses processes carries no secret
        super().__init__(index, task, error_type, message)
        self.index, self.task, self.error_type, self.message = index, task, error_type, message
        self.traceback, self.transcript = traceback, list(transcript or [])
        self.stop_reason, self.run_id, self.worker = stop_reason, run_id, worker

    def __reduce__(self) -> tuple[type[TaskFailure], tuple[object, ...]]:
        return (TaskFailure, (self.index, self.task, self.error_type, self.message, self.traceback, self.transcript,
                              self.stop_reason, self.run_id, self.worker))

    def __str__(self) -> str:
        return f"task {self.index} failed: {self.error_type}: {self.message}"

    @classmethod
    def from_exception(cls, index: int, task: str, exc: BaseException, run_id: str | None = None,
                       worker: str | None = None) -> "TaskFailure":
        result = result_of(exc)
        redact_chain(exc)
        rows = [m.row() for m in getattr(result, "transcript", None) or []]
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return cls(index, task, type(exc).__name__, str(exc), tb, rows, getattr(result, "stop_reason", None),
                   run_id, worker)


@dataclass
class TaskOutcome:
    """One task's end: its output or its failure, and how it got there."""

    index: int
    output: Any = None
    failure: TaskFailure | None = None
    run_id: str | None = None
    resumed: bool = False  # rebuilt from a finished checkpoint: no model call
    model_calls: int = 0  # model requests this attempt made (retries included)
    worker: str = ""
    seconds: float = 0.0
    kept: Any = None  # what ``execute_batch(keep=...)`` took from the run's result on its worker (None without one)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def result(self) -> Any:
        return self.output if self.failure is None else self.failure


@dataclass
class BatchReport:
    """A batch's results in task order (a ``TaskFailure`` in a failed task's slot) and its numbers."""

    outcomes: list[TaskOutcome]
    executor: str
    workers: int
    wall_s: float = 0.0
    startup_s: float = 0.0  # connecting to (or starting) Ray and readying the workers
    dead_workers: int = 0
    requeued_chunks: int = 0

    @property
    def results(self) -> list[Any]:
        return [o.result for o in self.outcomes]

    @property
    def failures(self) -> list[TaskFailure]:
        return [o.failure for o in self.outcomes if o.failure is not None]

    @property
    def completed(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def failed(self) -> int:
        return len(self.outcomes) - self.completed

    @property
    def model_calls(self) -> int:
        return sum(o.model_calls for o in self.outcomes)

    @property
    def resumed(self) -> int:
        return sum(o.resumed for o in self.outcomes)


@dataclass
class BatchProgress:
    """What ``on_progress`` is told after each chunk (``actors``: the Ray actor handles)."""

    done: int
    failed: int
    total: int
    actors: list[Any] = field(default_factory=list)
    live: list[int] = field(default_factory=list)


# ---- run ids and checkpoint files ----
def run_id_for(digest: str, index: int, task: str) -> str:
    """The deterministic run id of task ``index`` of a batch of the pattern with config ``digest``."""
    return hashlib.sha256(f"{digest}\0{index}\0{task}".encode()).hexdigest()[:32]


def is_store_uri(checkpoint_dir: object) -> TypeGuard[str]:
    """``checkpoint_dir`` names one PostgreSQL store (``postgresql://`` or ``postgres://``), not a folder."""
    return isinstance(checkpoint_dir, str) and checkpoint_dir.lower().startswith(("postgresql://", "postgres://"))


def _finished(stop: str | None) -> bool:
    return stop is not None and stop not in ("error", "cancelled")


def find_runs(checkpoint_dir: CheckpointDir) -> dict[str, tuple[str, bool]]:
    """run id -> (checkpoint file, finished) over every ``*.db`` in ``checkpoint_dir``; a finished
    copy wins over an unfinished one, then the most recently updated. For a PostgreSQL URI: its
    runs, each in that store; for a checkpointer object (a local batch's): its runs, each named ``"<store>"``."""
    if not isinstance(checkpoint_dir, (str, Path)):
        return {r.run_id: ("<store>", _finished(r.stop_reason)) for r in checkpoint_dir.list_runs()}
    if is_store_uri(checkpoint_dir):
        store = PostgresCheckpointer(str(checkpoint_dir))
        try:
            return {r.run_id: (str(checkpoint_dir), _finished(r.stop_reason)) for r in store.list_runs()}
        finally:
            store.close()
    best: dict[str, tuple[str, bool, tuple[bool, float]]] = {}
    for db in sorted(Path(checkpoint_dir).glob("*.db")):
        try:
            rows = SqliteCheckpointer.run_ends(db)
        except CheckpointStoreError:
            continue
        for run_id, stop, updated in rows:
            finished = _finished(stop)
            key = (finished, updated)
            if run_id not in best or key > best[run_id][2]:
                best[run_id] = (str(db), finished, key)
    return {k: (path, fin) for k, (path, fin, _) in best.items()}


class ShardRunner:
    """Runs items of one batch with asyncio, at most ``max_concurrency`` at once; one outcome each,
    never an exception. Checkpoints (when ``checkpoint_dir``) go to ``worker-<slot>.db``, or to the
    one PostgreSQL store a URI names."""

    def __init__(self, pattern: BatchPattern, max_concurrency: int, checkpoint_dir: CheckpointDir | None, slot: str,
                 on_done: Callable[[TaskOutcome], None] | None = None, commit: str = DEFAULT_COMMIT,
                 keep: Callable[[RunResult], object] | None = None):
        self.pattern, self.max_concurrency, self.slot, self.on_done = pattern, max_concurrency, slot, on_done
        self.keep = keep  # what each outcome keeps of its run's result, the failed runs' too (``TaskOutcome.kept``)
        self.commit = commit  # how a new checkpointed run commits (a resumed one: as it was started)
        self.given = None if checkpoint_dir is None or isinstance(checkpoint_dir, (str, Path)) else checkpoint_dir
        self.dir = Path(checkpoint_dir) if isinstance(checkpoint_dir, (str, Path)) and checkpoint_dir and \
            not is_store_uri(checkpoint_dir) else None
        self.store = checkpoint_dir if is_store_uri(checkpoint_dir) else None
        self._gate: asyncio.Semaphore | None = None
        self._cps: dict[str, PostgresCheckpointer | SqliteCheckpointer] = {}

    def checkpointer(self, path: str | Path) -> PostgresCheckpointer | SqliteCheckpointer:
        key = str(path)
        if key not in self._cps:
            self._cps[key] = PostgresCheckpointer(key) if is_store_uri(key) else SqliteCheckpointer(key)
        return self._cps[key]

    def close(self) -> None:
        for cp in self._cps.values():
            cp.close()
        self._cps.clear()

    async def run_items(self, items: Sequence[Item]) -> list[TaskOutcome]:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.max_concurrency)
        return list(await asyncio.gather(*(self.run_one(*item) for item in items)))

    async def run_one(self, index: int, task: str, run_id: str | None, resume_from: str | None,
                      finished: bool) -> TaskOutcome:
        assert self._gate is not None
        async with self._gate:
            calls = [0]
            token = REQUESTS.set(calls)  # counted where they are sent: each goes its own way (the fast path...)
            start = time.perf_counter()
            kept = None
            try:
                result = await self._run(task, run_id, resume_from)
                if self.keep is not None:
                    kept = self.keep(result)
                if result.error is not None:
                    raise attach_result(result.error, result)
                out = TaskOutcome(index, output=result.output, run_id=run_id, resumed=finished and calls[0] == 0,
                                  kept=kept)
            except Exception as exc:
                out = TaskOutcome(index, failure=TaskFailure.from_exception(index, task, exc, run_id, self.slot),
                                  run_id=run_id, kept=kept)
            finally:
                REQUESTS.reset(token)
            out.model_calls, out.worker, out.seconds = calls[0], self.slot, time.perf_counter() - start
        if self.on_done is not None:
            self.on_done(out)
        return out

    async def _run(self, task: str, run_id: str | None, resume_from: str | None) -> RunResult:
        if (self.dir is None and self.store is None and self.given is None) or run_id is None:
            return await self.pattern.aexecute(task)
        own: Checkpointer
        if self.given is not None:  # the caller's own store (a local batch): every run in it, resumed from it
            own = self.given
        elif resume_from is not None:
            return await self.pattern.aresume(run_id, self.checkpointer(resume_from))
        else:
            own = self.checkpointer(self.store if self.store is not None else
                                    Path(str(self.dir)) / f"worker-{self.slot}.db")
        try:
            own.load(run_id)  # started here earlier (a re-queued chunk): continue it, never append to it
        except KeyError:
            return await self.pattern.aexecute(task, checkpoint=own, run_id=run_id, commit=self.commit)
        return await self.pattern.aresume(run_id, own)


class SharedWindow:
    """The body of a Ray actor holding one ``RateLimit`` for every worker of a batch: its window and
    its clock are the only ones, so the limit holds across processes and machines."""

    def __init__(self, rpm: int | None, tpm: int | None, window: float):
        self.limit = RateLimit(rpm, tpm, window=window)
        self.entries: dict[int, list[float]] = {}
        self.next = 0

    def reserve(self, tokens: float) -> tuple[int | None, float]:
        """``(entry id, 0)`` when a request of ``tokens`` fits now (it is counted), else ``(None, seconds to wait)``."""
        entry, wait = self.limit.reserve(tokens)
        if entry is None:
            return None, wait
        self.next += 1
        self.entries[self.next] = entry
        return self.next, 0.0

    def settle(self, entry_id: int, tokens: float) -> None:
        entry = self.entries.pop(entry_id, None)
        if entry is not None:
            self.limit.settle(entry, tokens)


class SharedRateLimit(RateLimit):
    """A worker's view of a ``SharedWindow``: every reservation is made by the actor; the wait
    between tries is this process's."""

    def __init__(self, window: Any, rpm: int | None, tpm: int | None, seconds: float):
        super().__init__(rpm, tpm, window=seconds)
        self.shared = window

    def __repr__(self) -> str:
        return f"SharedRateLimit(rpm={self.rpm}, tpm={self.tpm}, window={self.window})"

    def reserve(self, tokens: float = 0.0) -> tuple[Any, float]:
        entry_id, wait = _ray().get(self.shared.reserve.remote(tokens))
        return (entry_id, 0.0) if entry_id is not None else (None, wait)

    async def acquire(self, tokens: float = 0.0, within: float | None = None) -> tuple[object, float] | None:
        async def reserve(t: float) -> tuple[object, float]:
            entry_id, wait = await self.shared.reserve.remote(t)
            return entry_id, wait

        return await wait_for_room(reserve, self.sleep, tokens, within)

    def settle(self, entry: object, tokens: float) -> None:
        self.shared.settle.remote(entry, tokens)


class ShardWorker:
    """The body of a Ray actor: rebuilds a batch's pattern from its config and runs its chunks."""

    def __init__(self, slot: str):
        self.slot = slot
        self.batches: dict[str, ShardRunner] = {}
        self.shared: dict[str, list[tuple[str, RateLimit | None]]] = {}  # batch -> the limits it replaced
        get_litellm()  # litellm's import (seconds) is paid at start-up, not by the first task

    async def ping(self) -> str:
        return self.slot

    async def prepare(self, batch_id: str, config: str, max_concurrency: int, checkpoint_dir: str | None,
                      shared: dict[str, tuple[Any, int | None, int | None, float]] | None = None,
                      commit: str = DEFAULT_COMMIT, keep: Callable[[RunResult], object] | None = None) -> str:
        # trusted: the driver made this config with to_config() from the pattern object its caller
        # holds (never from outside input), and a Ray cluster runs the driver's code anyway
        pattern = from_config(config, trusted=True)
        before = limits()
        self.shared[batch_id] = [(target, before.get(target)) for target in shared or {}]
        for target, (window, rpm, tpm, seconds) in (shared or {}).items():
            rate_limit(target, SharedRateLimit(window, rpm, tpm, seconds))
        self.batches[batch_id] = ShardRunner(pattern, max_concurrency, checkpoint_dir, self.slot, commit=commit,
                                             keep=keep)
        return self.slot

    async def run_chunk(self, batch_id: str, items: list[Item]) -> list[TaskOutcome]:
        return await self.batches[batch_id].run_items(items)

    async def release(self, batch_id: str) -> None:
        runner = self.batches.pop(batch_id, None)
        if runner is not None:
            runner.close()
        for target, earlier in self.shared.pop(batch_id, []):
            rate_limit(target, earlier)


# ---- Ray: connecting, the worker pool ----
def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise ImportError(RAY_MISSING) from None
    return ray


def start_local_ray(num_cpus: int | None = None, runtime_env: Mapping[str, object] | None = None,
                    **init_kw: object) -> Any:
    """``ray.init`` of a local instance whose workers import what this process imports: its
    ``sys.path`` travels as ``PYTHONPATH`` (so module-level functions of scripts and test modules
    resolve on the workers). The dashboard is off unless asked for."""
    ray = _ray()
    given = (runtime_env or {}).get("env_vars") or {}
    if not isinstance(given, Mapping):
        raise TypeError(f"runtime_env['env_vars'] must be a dict, got {type(given).__name__}")
    env = dict(given)
    paths = [os.path.abspath(p) for p in sys.path if p and os.path.exists(p)]
    extra = env.get("PYTHONPATH") or os.environ.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths + ([extra] if extra else [])))
    init_kw.setdefault("include_dashboard", False)
    return ray.init(num_cpus=num_cpus, runtime_env={**(runtime_env or {}), "env_vars": env}, **init_kw)


def connect(address: str | None = None, runtime_env: Mapping[str, object] | None = None) -> bool:
    """Use the Ray this process is connected to, else start a local one (``address=None``) or join
    ``address`` (``"auto"``, ``"ray://host:10001"``). True when this call connected."""
    ray = _ray()
    if ray.is_initialized():
        return False
    if address is None:
        start_local_ray(runtime_env=runtime_env)
    else:
        ray.init(address=address, runtime_env=runtime_env)
    return True


class _Pool(TypedDict):
    key: tuple[object, str] | None  # (the Ray job id, the actors' options)
    actors: list[Any]  # Ray actor handles


_POOL: _Pool = {"key": None, "actors": []}  # reused across batches of one Ray session


def worker_pool(n: int, options: Mapping[str, object] | None = None, timeout: float = 300.0) -> list[Any]:
    """``n`` live ``ShardWorker`` actors (kept between batches; dead ones are replaced)."""
    ray = _ray()
    opts = {"num_cpus": 1, "max_restarts": 0, **(options or {})}
    key = (ray.get_runtime_context().get_job_id(), repr(sorted(opts.items())))
    if _POOL["key"] != key:
        _POOL["key"], _POOL["actors"] = key, []
    live = []
    if _POOL["actors"]:
        pings = [a.ping.remote() for a in _POOL["actors"]]
        ray.wait(pings, num_returns=len(pings), timeout=30)
        for actor, ping in zip(_POOL["actors"], pings):
            try:
                ray.get(ping, timeout=0)
                live.append(actor)
            except Exception:
                ray.kill(actor)
    cls = ray.remote(ShardWorker).options(**opts)
    fresh = [cls.remote(f"{len(live) + i}-{uuid.uuid4().hex[:6]}") for i in range(max(0, n - len(live)))]
    if fresh:
        ready = [a.ping.remote() for a in fresh]
        done, _ = ray.wait(ready, num_returns=len(ready), timeout=timeout)
        if len(done) < len(ready):
            for a in fresh:
                ray.kill(a)
            raise RuntimeError(f"only {len(done)} of {len(ready)} Ray workers started within {timeout:.0f} s; the "
                               f"cluster may lack resources for {n} workers with {opts} (lower workers= or "
                               "worker_options={'num_cpus': ...})")
        ray.get(done)
    _POOL["actors"] = actors = live + fresh
    return actors[:n]


def shutdown() -> None:
    """Drop the worker pool and disconnect from Ray."""
    _POOL["key"], _POOL["actors"] = None, []
    ray = _ray()
    if ray.is_initialized():
        ray.shutdown()


# ---- the batch ----
def execute_batch(pattern: BatchPattern, tasks: Sequence[str], *, executor: str = "ray", address: str | None = None,
                  workers: int | None = None, max_concurrency_per_worker: int = 16,
                  checkpoint_dir: CheckpointDir | None = None, progress: bool | None = None,
                  chunk_size: int | None = None, runtime_env: Mapping[str, object] | None = None,
                  worker_options: Mapping[str, object] | None = None,
                  on_progress: Callable[[BatchProgress], None] | None = None,
                  max_chunk_attempts: int = 3, commit: str = DEFAULT_COMMIT,
                  keep: Callable[[RunResult], object] | None = None,
                  on_outcome: Callable[[TaskOutcome], None] | None = None, run_id_prefix: str = "") -> BatchReport:
    """Run one conversation per task and report every outcome (see the module doc).

    ``workers``: Ray actors (default: the cluster's CPUs); ``progress``: the rich bar (default: when
    stderr is a terminal); ``chunk_size``: tasks per hand-out (default: enough for two chunks per
    worker in flight); ``runtime_env``: for a Ray this call starts or joins; ``worker_options``:
    ``.options()`` of each actor (default ``num_cpus=1``); ``on_progress``: called after each chunk;
    a chunk whose worker dies is re-queued up to ``max_chunk_attempts`` times in all; ``commit``:
    how each checkpointed run commits its steps (``fsmchat.store.writer.COMMIT_MODES``); ``keep``:
    a function of each run's ``RunResult``, called where the run ran (a failed run's too), whose
    value comes back as the outcome's ``kept`` (on Ray it is pickled both ways: a module-level
    function returning JSON data; ``fsmchat.evals`` keeps each run's trajectory this way); ``on_outcome``:
    called with each task's outcome as soon as it ends, before the batch does (locally in the thread
    that runs the batch, on Ray in the driver as the outcomes of a chunk come back; a task's first
    outcome only), so a caller can keep each finished run at once (``fsmchat.evals`` appends it to
    its cassette: a killed eval loses only the runs in flight); ``run_id_prefix``: put before each
    checkpointed run's id (``run_id_for``), so batches of the same config and tasks that must not
    find each other's runs (one eval's and the next's, in one store) get ids of their own. Locally
    ``checkpoint_dir`` may also be a checkpointer object (``SqliteCheckpointer(...)``,
    ``MemoryCheckpointer()``): every run is checkpointed in it, and a pattern without a config (a
    lambda or closure in it) may be checkpointed when a ``run_id_prefix`` names its runs."""
    tasks = check_tasks(tasks, type(pattern).__name__)
    check_commit(commit, f"{type(pattern).__name__}.run_batch", "checkpoint_dir" if checkpoint_dir is None else None)
    if executor not in ("local", "ray"):
        raise ValueError(f"executor={executor!r}; choose from ['local', 'ray']")
    if isinstance(max_concurrency_per_worker, bool) or not isinstance(max_concurrency_per_worker, int) \
            or max_concurrency_per_worker < 1:
        raise ValueError(f"max_concurrency_per_worker must be an int >= 1, got {max_concurrency_per_worker!r}")
    if executor == "local" and address is not None:
        raise ValueError('address= is for executor="ray"')
    if keep is not None and not callable(keep):
        raise ValueError(f"keep must be a function of a run's RunResult (or None), got {keep!r}")
    if on_outcome is not None and not callable(on_outcome):
        raise ValueError(f"on_outcome must be a function of a TaskOutcome (or None), got {on_outcome!r}")
    if not isinstance(run_id_prefix, str):
        raise ValueError(f"run_id_prefix must be a str, got {run_id_prefix!r}")
    given = checkpoint_dir is not None and not isinstance(checkpoint_dir, (str, Path))
    if given and (executor != "local" or not callable(getattr(checkpoint_dir, "list_runs", None))):
        raise ValueError(f"checkpoint_dir={type(checkpoint_dir).__name__}(...): a checkpointer object is for "
                         'executor="local" (Ray workers write to a folder or a PostgreSQL URI)')
    # missing keys: one error for the batch, checked here when local (Ray workers read their own)
    pattern.preflight(tasks, credentials=executor == "local")
    config = digest = None
    if executor == "ray" or checkpoint_dir is not None:
        try:
            config = to_config(pattern)
            digest = config_digest(config)
        except (TypeError, ValueError):
            if executor == "ray" or not (given and run_id_prefix):
                raise
            digest = ""  # a local store's runs, named by the prefix, the index and the task
    if not tasks:
        return BatchReport([], executor, 0)
    items = _items(tasks, digest, checkpoint_dir, prefix=run_id_prefix)
    ckpt = checkpoint_dir if not isinstance(checkpoint_dir, (str, Path)) or is_store_uri(checkpoint_dir) else \
        str(Path(checkpoint_dir).resolve())  # None, a store object, a store URI, or a folder made absolute
    bar = ProgressBar(len(tasks), progress, f"{type(pattern).__name__} batch")
    try:
        if executor == "local":
            return _run_local(pattern, items, max_concurrency_per_worker, ckpt, bar, commit, keep, on_outcome)
        assert config is not None  # executor="ray": to_config made it above (or raised)
        return _run_ray(config, items, address=address, workers=workers, per_worker=max_concurrency_per_worker,
                        checkpoint_dir=ckpt, chunk_size=chunk_size, runtime_env=runtime_env,
                        worker_options=worker_options, on_progress=on_progress, bar=bar,
                        max_chunk_attempts=max_chunk_attempts, commit=commit, keep=keep, on_outcome=on_outcome)
    finally:
        bar.close()


def run_batch(pattern: Any, tasks: Sequence[str], *, executor: str = "ray", **kw: Any) -> list[Any]:
    """``execute_batch(...).results``: outputs in task order, as a local ``run_batch`` returns them,
    with a ``TaskFailure`` in a failed task's slot (``executor="local"`` raises the first failure
    instead, as the plain local ``run_batch`` does, once every task has ended)."""
    report = execute_batch(pattern, tasks, executor=executor, **kw)
    if executor == "local":
        for o in report.outcomes:
            if o.failure is not None:
                raise o.failure
    return report.results


def _items(tasks: list[str], digest: str | None, checkpoint_dir: CheckpointDir | None,
           ids: list[tuple[int, str | None]] | None = None, prefix: str = "") -> list[Item]:
    """``(index, task, run_id, resume_from, finished)`` per task: where each run was checkpointed
    before, if anywhere (``ids``: the indexes and run ids, when already known; ``prefix``: put
    before each new run id)."""
    if checkpoint_dir is None or (digest is None and ids is None):
        return [(i, t, None, None, False) for i, t in enumerate(tasks)]
    if isinstance(checkpoint_dir, (str, Path)) and not is_store_uri(checkpoint_dir):
        Path(checkpoint_dir).mkdir(parents=True, exist_ok=True)
    known = find_runs(checkpoint_dir)
    if ids is None:
        ids = [(i, prefix + run_id_for(digest or "", i, t)) for i, t in enumerate(tasks)]
    out: list[Item] = []
    for (i, rid), t in zip(ids, tasks):
        path, finished = known.get(rid, (None, False)) if rid is not None else (None, False)
        out.append((i, t, rid, path, finished))
    return out


def _run_local(pattern: BatchPattern, items: list[Item], per_worker: int, checkpoint_dir: CheckpointDir | None,
               bar: ProgressBar, commit: str, keep: Callable[[RunResult], object] | None = None,
               on_outcome: Callable[[TaskOutcome], None] | None = None) -> BatchReport:
    start = time.perf_counter()

    def done(o: TaskOutcome) -> None:
        bar.add(o.ok, not o.ok)
        if on_outcome is not None:
            on_outcome(o)

    runner = ShardRunner(pattern, per_worker, checkpoint_dir, "local", on_done=done, commit=commit, keep=keep)
    try:
        outcomes = run_sync(lambda: runner.run_items(items))
    finally:
        runner.close()
    return BatchReport(outcomes, "local", 1, wall_s=time.perf_counter() - start)


def _cause(exc: BaseException) -> BaseException:
    """The worker's own exception inside Ray's wrapper (``RayTaskError.cause``)."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, BaseException) else exc


@dataclass
class _Chunk:
    id: int
    items: list[Item]
    attempts: int = 0


class _RayBatch:
    """The driver's side of one batch: hands out chunks (two in flight per live worker), keeps the
    first outcome per task, re-queues the chunks of a dead worker on the live ones."""

    def __init__(self, ray: Any, actors: list[Any], batch_id: str, items: list[Item], size: int, bar: ProgressBar,
                 checkpoint_dir: CheckpointDir | None, max_chunk_attempts: int,
                 on_progress: Callable[[BatchProgress], None] | None,
                 on_outcome: Callable[[TaskOutcome], None] | None = None):
        from ray.exceptions import RayActorError

        self.ray, self.actor_died, self.actors, self.batch_id = ray, RayActorError, actors, batch_id
        self.bar, self.checkpoint_dir, self.on_progress, self.on_outcome = bar, checkpoint_dir, on_progress, on_outcome
        self.max_attempts = max_chunk_attempts
        self.total = len(items)
        self.pending = deque(_Chunk(k, items[i:i + size]) for k, i in enumerate(range(0, self.total, size)))
        self.outcomes: list[TaskOutcome | None] = [None] * self.total
        self.inflight: dict[object, tuple[int, _Chunk]] = {}  # Ray object refs, only passed back to Ray
        self.load = [0] * len(actors)
        self.live = set(range(len(actors)))
        self.dead = self.requeued = 0

    def run(self) -> list[TaskOutcome]:
        try:
            while self.pending or self.inflight:
                self.hand_out()
                if not self.inflight:  # no live worker is left
                    for chunk in self.pending:
                        self.lost(chunk, "every Ray worker died before this task ran")
                    break
                ready, _ = self.ray.wait(list(self.inflight), num_returns=1, timeout=1.0)
                for ref in ready:
                    self.collect(ref)
        finally:
            for ref in self.inflight:  # interrupted: stop what still runs (best effort)
                try:
                    self.ray.cancel(ref)
                except Exception:
                    pass
            for w in self.live:
                self.actors[w].release.remote(self.batch_id)
        assert all(o is not None for o in self.outcomes), "a task has no outcome"
        return [o for o in self.outcomes if o is not None]

    def hand_out(self) -> None:
        for w in sorted(self.live):
            while self.load[w] < 2 and self.pending:
                chunk = self.pending.popleft()
                chunk.attempts += 1
                self.inflight[self.actors[w].run_chunk.remote(self.batch_id, chunk.items)] = (w, chunk)
                self.load[w] += 1

    def collect(self, ref: object) -> None:
        w, chunk = self.inflight.pop(ref)
        self.load[w] -= 1
        try:
            self.record(self.ray.get(ref))
        except self.actor_died as exc:
            if w in self.live:
                self.live.discard(w)
                self.dead += 1
            if chunk.attempts >= self.max_attempts:
                self.lost(chunk, f"its Ray worker died {chunk.attempts} times: {exc}")
            else:
                if self.checkpoint_dir is not None:  # resume what the dead worker committed
                    chunk.items = _items([t for _, t, _, _, _ in chunk.items], None, self.checkpoint_dir,
                                         [(i, rid) for i, _, rid, _, _ in chunk.items])
                self.pending.appendleft(chunk)
                self.requeued += 1
        except Exception as exc:  # the chunk call itself failed, not one task: report it on each task
            cause = _cause(exc)
            self.record([TaskOutcome(i, failure=TaskFailure(i, t, type(cause).__name__, str(cause), str(exc),
                                                            run_id=rid), run_id=rid)
                         for i, t, rid, _, _ in chunk.items])
        if self.on_progress is not None:
            self.on_progress(BatchProgress(self.bar.done, self.bar.failed, self.total, list(self.actors),
                                           sorted(self.live)))

    def record(self, new: list[TaskOutcome]) -> None:
        ok = failed = 0
        for o in new:
            if self.outcomes[o.index] is None:  # the first outcome of a task wins; a re-run's duplicate is dropped
                self.outcomes[o.index] = o
                ok, failed = ok + o.ok, failed + (not o.ok)
                if self.on_outcome is not None:
                    self.on_outcome(o)
        self.bar.add(ok, failed)

    def lost(self, chunk: _Chunk, why: str) -> None:
        self.record([TaskOutcome(i, failure=TaskFailure(i, t, "WorkerLost", why, run_id=rid), run_id=rid)
                     for i, t, rid, _, _ in chunk.items])


def _run_ray(config: PatternSpec, items: list[Item], *, address: str | None, workers: int | None,
             per_worker: int, checkpoint_dir: CheckpointDir | None, chunk_size: int | None,
             runtime_env: Mapping[str, object] | None, worker_options: Mapping[str, object] | None,
             on_progress: Callable[[BatchProgress], None] | None, bar: ProgressBar, max_chunk_attempts: int,
             commit: str, keep: Callable[[RunResult], object] | None = None,
             on_outcome: Callable[[TaskOutcome], None] | None = None) -> BatchReport:
    ray = _ray()
    t0 = time.perf_counter()
    started = connect(address, runtime_env)
    try:
        n = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        actors = worker_pool(n, worker_options)
        batch_id = uuid.uuid4().hex
        text = config.model_dump_json()
        windows = {target: (ray.remote(SharedWindow).options(num_cpus=0).remote(lim.rpm, lim.tpm, lim.window),
                            lim.rpm, lim.tpm, lim.window) for target, lim in limits().items()}
        try:
            ray.get([a.prepare.remote(batch_id, text, per_worker, checkpoint_dir, windows, commit, keep)
                     for a in actors])
        except Exception as exc:
            cause = _cause(exc)
            raise RuntimeError(f"a Ray worker could not rebuild the pattern from its config: {type(cause).__name__}: "
                               f"{cause}. Every import path in the config must import on the workers: install the "
                               "module there or ship it with runtime_env={'working_dir': ...}") from exc
        startup = time.perf_counter() - t0
        size = chunk_size or max(1, min(2 * per_worker, math.ceil(len(items) / (2 * n))))
        batch = _RayBatch(ray, actors, batch_id, items, size, bar, checkpoint_dir, max_chunk_attempts, on_progress,
                          on_outcome)
        try:
            outcomes = batch.run()
        finally:
            for window in windows.values():
                ray.kill(window[0])
        return BatchReport(outcomes, "ray", n, wall_s=time.perf_counter() - t0, startup_s=startup,
                           dead_workers=batch.dead, requeued_chunks=batch.requeued)
    finally:
        if started:
            shutdown()
