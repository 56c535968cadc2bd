"""``Eval(executor="local" | "ray")``: the runs an eval needs, made by the batch runner before scoring.

Every run the eval needs that its cassette does not hold (each case under each variant, ``repeat``
times) is made with ``fsmchat.patterns.distributed.execute_batch``: one batch per pattern, the cases whose
factory output has the same config (``to_config``, ``config_digest``) sharing it, so a variant that
changes only the model is one batch of cases x repeats. Locally a batch runs
``max_concurrency_per_worker`` runs at once in this process; on Ray its config goes to the workers
(a pattern that holds a lambda or a closure cannot, and is refused before any model call). Each
worker sends back the run's trajectory as JSON data (``keep=trajectory_data``, in
``TaskOutcome.kept``); the eval adds each to its cassette, and pydantic-evals then scores every run
as it scores recorded ones (``fsmchat.evals.run``).
"""
from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..checks import Count
from ..config.convert import config_digest, to_config
from ..patterns.distributed import RAY_MISSING, BatchReport, TaskOutcome, connect, execute_batch, shutdown
from ..errors import ConfigError, ConfigTypeError
from .dataset import CaseInputs
from .trajectory import trajectory_data

EXECUTORS = ("local", "ray")
BATCH_OPTIONS = ("workers", "chunk_size", "runtime_env", "worker_options", "max_chunk_attempts")
"""``execute_batch``'s options an eval passes on to Ray batches (``Eval(batch_options={...})``)."""


@dataclass(frozen=True)
class Wanted:
    """One run an eval needs that its cassette does not hold: a case under a variant.

    Attributes:
        variant: The variant's name.
        case: The case's name.
        key: The cassette key of the case under the variant (``case_key``).
        task: The case's task.

    Examples:
        >>> Wanted("terse", "refund", "k1", "Refund order 1042.").task
        'Refund order 1042.'
    """

    variant: str
    case: str
    key: str
    task: str


@dataclass
class Batch:
    """The wanted runs of one pattern: the cases whose factory output has one config, run as one batch.

    Attributes:
        pattern: The pattern (or flow) the first of them built; every run of the batch runs on it.
        runs: The runs, in the order the eval wants them (variant, case, repeat).

    Examples:
        >>> Batch(pattern=None).runs
        []
    """

    pattern: Any
    runs: list[Wanted] = field(default_factory=list)


def check_executor(executor: Any, address: Any, per_worker: Any, options: Any) -> None:
    """Refuse an eval's batch-runner options before any model call (``Eval.__post_init__`` calls it).

    Args:
        executor: ``"local"``, ``"ray"`` or None (each case run by pydantic-evals' task).
        address: The Ray cluster to join (``"auto"``, ``"ray://host:10001"``), or None.
        per_worker: Runs at once per worker (None: the eval's ``max_concurrency``).
        options: More ``execute_batch`` options (``BATCH_OPTIONS``).

    Raises:
        ConfigError: An unknown executor, or Ray missing for ``executor="ray"``.
        ConfigTypeError: An option of the wrong type, or given without an executor (or for Ray only).

    Examples:
        >>> check_executor("ray", None, 8, {"chunk_size": 4})
        >>> check_executor("rya", None, None, {})
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Eval(executor='rya') is invalid: 'local' (the batch runner in this process), 'ray' (Ray workers), or None (each case run by pydantic-evals' task)
    """
    if executor is not None and executor not in EXECUTORS:
        raise ConfigError(f"Eval(executor={executor!r}) is invalid: 'local' (the batch runner in this process), "
                          "'ray' (Ray workers), or None (each case run by pydantic-evals' task)")
    if not isinstance(options, Mapping):
        raise ConfigTypeError(f"Eval(batch_options={options!r:.80}) is invalid: a dict of execute_batch's options "
                              f"({', '.join(BATCH_OPTIONS)})")
    given = [name for name, value in (("address", address), ("max_concurrency_per_worker", per_worker),
                                      *((f"batch_options[{k!r}]", v) for k, v in options.items())) if value is not None]
    if executor is None and given:
        raise ConfigTypeError(f"Eval({given[0]}=...) is for the batch runner: give executor='local' or 'ray' too")
    if executor == "local" and address is not None:
        raise ConfigTypeError(f"Eval(address={address!r}) is for executor='ray' (the Ray cluster to join)")
    if address is not None and (not isinstance(address, str) or not address.strip()):
        raise ConfigTypeError(f"Eval(address={address!r}) is invalid: a Ray address ('auto', 'ray://host:10001'), "
                              "or None to start a local Ray")
    if per_worker is not None:
        Count(1).check(per_worker, "Eval", "max_concurrency_per_worker")
    for name, value in options.items():
        if name not in BATCH_OPTIONS:
            raise ConfigTypeError(f"Eval(batch_options={{{name!r}: ...}}) is invalid: execute_batch's options an eval "
                                  f"passes on are {', '.join(BATCH_OPTIONS)}")
        if name in ("workers", "chunk_size", "max_chunk_attempts") and value is not None:
            Count(1).check(value, "Eval", f"batch_options[{name!r}]")
        if name in ("runtime_env", "worker_options") and value is not None and not isinstance(value, Mapping):
            raise ConfigTypeError(f"Eval(batch_options={{{name!r}: {value!r:.60}}}) is invalid: a dict, or None")
        if value is not None and executor == "local":  # the local batch runner takes none of them
            raise ConfigTypeError(f"Eval(batch_options={{{name!r}: ...}}) is for executor='ray' (Ray's workers and "
                                  "chunks); locally a batch runs max_concurrency_per_worker runs at once")
    if executor == "ray" and importlib.util.find_spec("ray") is None:
        raise ConfigError(f"Eval(executor='ray'): {RAY_MISSING}")


def group_key(pattern: Any, variant: str, settings: Mapping[str, Any], inputs: CaseInputs, executor: str) -> str:
    """Which batch a case's pattern joins: its config's digest (equal configs share a batch).

    Args:
        pattern: What ``build(**settings, **inputs.inputs)`` returned.
        variant: The variant's name (for the error).
        settings: The variant's keywords for the factory.
        inputs: The case's inputs.
        executor: ``"local"`` or ``"ray"``.

    Returns:
        ``config_digest(to_config(pattern))``; locally, a pattern without a config (a lambda or a
        closure in it) is keyed by the factory's keywords instead (the same keywords, the same pattern).

    Raises:
        ConfigTypeError: The pattern is not a pattern or flow (no ``preflight``: the batch runner
            needs one), or, for Ray, it has no config, naming the variant and what to do.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> def build():
        ...     def critic(turn):
        ...         return "Not yet."
        ...     return RoundRobinSwarm(agents=[critic], max_loops=1)
        >>> group_key(build(), "v", {}, CaseInputs(task="Hi"), "local")
        'keywords:{}'
        >>> group_key(build(), "v", {}, CaseInputs(task="Hi"), "ray")
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigTypeError: Eval(executor='ray'): variant 'v' builds a RoundRobinSwarm that cannot be sent to Ray workers: RoundRobinSwarm agent 'critic': build.<locals>.critic is defined inside a function (a closure), which cannot be shipped in a config (it has no import path); define it at module level and pass state as data. Build it from module-level functions and importable objects (its to_config() must succeed), or run the eval with executor='local'
    """
    if not callable(getattr(pattern, "preflight", None)):
        raise ConfigTypeError(f"Eval(executor={executor!r}): variant {variant!r} builds a {type(pattern).__name__}, "
                              "which the batch runner cannot run (a pattern or flow: run_batch's preflight and "
                              "to_config); leave executor unset to run it case by case")
    try:
        return config_digest(to_config(pattern))
    except (TypeError, ValueError) as exc:
        if executor == "ray":
            raise ConfigTypeError(f"Eval(executor='ray'): variant {variant!r} builds a {type(pattern).__name__} that "
                                  f"cannot be sent to Ray workers: {exc}. Build it from module-level functions and "
                                  "importable objects (its to_config() must succeed), or run the eval with "
                                  "executor='local'") from None
        return "keywords:" + json.dumps({**settings, **inputs.inputs}, sort_keys=True, default=repr)


@contextlib.contextmanager
def ray_session(executor: str, address: str | None, runtime_env: Mapping[str, Any] | None) -> Iterator[None]:
    """One Ray connection (and worker pool) for all of an eval's batches; left as found.

    Args:
        executor: ``"local"`` (nothing to do) or ``"ray"``.
        address: The cluster to join, or None for a local Ray (reused when this process has one).
        runtime_env: For a Ray this call starts or joins.

    Examples:
        >>> with ray_session("local", None, None):
        ...     pass
    """
    started = executor == "ray" and connect(address, dict(runtime_env) if runtime_env is not None else None)
    try:
        yield
    finally:
        if started:
            shutdown()


async def run_wave(pattern: Any, tasks: list[str], *, executor: str, address: str | None, per_worker: int,
                   options: Mapping[str, Any], progress: bool,
                   on_outcome: Callable[[TaskOutcome], None] | None = None, checkpoint: Any = None,
                   run_id_prefix: str = "") -> BatchReport:
    """Run one batch of tasks on ``pattern`` through ``execute_batch``, each outcome with its run's trajectory.

    ``execute_batch`` runs in a worker thread (this event loop stays free); each outcome's ``kept``
    is the run's trajectory as JSON data (``trajectory_data``, called where the run ran), and
    ``on_outcome`` is told each outcome as its run ends (locally from the batch's thread).

    Args:
        pattern: The batch's pattern or flow.
        tasks: One task per run (a case's task once per repeat).
        executor: ``"local"`` or ``"ray"``.
        address: The Ray cluster (None: the one ``ray_session`` connected to).
        per_worker: Runs at once per worker (locally: in this process).
        options: More ``execute_batch`` options (``BATCH_OPTIONS``).
        progress: Show the batch's progress bar.
        on_outcome: Called with each ``TaskOutcome`` as soon as its run ends (None: only the report).
        checkpoint: Where each run is checkpointed: the eval's store (locally), its PostgreSQL URI
            (on Ray), or None.
        run_id_prefix: Put before each checkpointed run's id (the eval's own, so evals never share ids).

    Returns:
        The ``BatchReport``, outcomes in task order.

    Examples:
        >>> import asyncio
        >>> from fsmchat import RoundRobinSwarm
        >>> def critic(turn):
        ...     return "Not yet."
        >>> report = asyncio.run(run_wave(RoundRobinSwarm(agents=[critic], max_loops=1), ["Ship?", "Now?"],
        ...                               executor="local", address=None, per_worker=2, options={}, progress=False))
        >>> [o.kept["output"] for o in report.outcomes]
        ['Not yet.', 'Not yet.']
    """
    opts = {k: v for k, v in options.items() if v is not None and k != "runtime_env"}
    if executor == "ray":
        opts["address"] = address
    return await asyncio.to_thread(execute_batch, pattern, tasks, executor=executor,
                                   max_concurrency_per_worker=per_worker, progress=progress, keep=trajectory_data,
                                   on_outcome=on_outcome, checkpoint_dir=checkpoint, run_id_prefix=run_id_prefix,
                                   **opts)
