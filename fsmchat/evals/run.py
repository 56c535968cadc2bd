"""Run a dataset across variants, score every run, and say whether it passed.

``Eval(dataset, build, variants)`` builds one conversation per case and variant with
``build(**variant, **case.inputs)``, runs it on the case's task (``repeat`` times), and scores it
with the dataset's evaluators (``fsmchat.evals.score`` drives the cases through pydantic-evals'
evaluators). Each variant's result is pydantic-evals' ``EvaluationReport``; ``EvalResult`` puts
them side by side (mean and a 95% confidence interval per evaluator) and checks thresholds.

Runs are recorded in a cassette (a JSONL file, one finished run a line, written as each ends): a
later eval with the same cassette re-scores those runs without a model call, and an eval that was
killed goes on from the runs it finished. ``max_calls`` and ``max_cost_usd`` bound the whole eval:
a run starts only when its worst-case calls fit what is left. With ``checkpoint=store`` every run
is kept in the store and, as the eval ends, its record (``fsmchat.evals.record``) beside them,
for the viewer's evaluation pages.

With ``executor="local"`` or ``"ray"`` the runs the cassette lacks are made first, as batches
through ``fsmchat.patterns.distributed.execute_batch`` (``fsmchat.evals.batch``: one batch per pattern
config, locally with ``max_concurrency_per_worker`` at once, or on Ray workers); each run's
trajectory comes back from its worker and joins the cassette as that run ends (appended at once:
a killed batch eval, too, loses only the runs in flight), and every run is then scored from there,
as recorded ones are.
"""
from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import statistics
import uuid
from collections import Counter, defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping, Sequence

from pydantic_evals import Dataset
from pydantic_evals.evaluators import Evaluator
from pydantic_evals.reporting import EvaluationReport

from ..checks import Count
from ..patterns.distributed import TaskOutcome, is_store_uri
from ..engine import batch_collector, run_sync
from ..errors import BudgetExceeded, ConfigTypeError, result_of
from ..store.checkpoint import Checkpointer, check_checkpoint, evals_of
from .batch import Batch, Wanted, check_executor, group_key, ray_session, run_wave
from .cassette import ACTIVE, Cassette
from .dataset import CaseInputs, cases_of, load_dataset
from .record import eval_record
from .score import EvalError, evaluate
from .trajectory import Trajectory

def case_key(variant: str, settings: Mapping[str, Any], inputs: CaseInputs) -> str:
    """The cassette key of one case under one variant: its task, inputs and the variant's settings.

    Args:
        variant: The variant's name.
        settings: The variant's keywords for the factory.
        inputs: The case's inputs.

    Returns:
        A hex digest; changing the task, an input or a setting changes it.

    Examples:
        >>> a = case_key("fast", {"model": "offline"}, CaseInputs(task="Hi"))
        >>> a == case_key("fast", {"model": "gpt-4o"}, CaseInputs(task="Hi"))
        False
    """
    data = json.dumps([variant, dict(settings), inputs.task, inputs.inputs], sort_keys=True, default=repr)
    return hashlib.sha256(data.encode()).hexdigest()[:32]


@dataclass
class Spent:
    """What an eval has used so far: model calls made and reserved (runs in flight), cost, recordings taken.

    Attributes:
        calls: Model calls made.
        reserved: The worst-case calls of the runs in flight.
        cost_usd: What the calls cost.
        recorded: Runs taken from the cassette.

    Examples:
        >>> Spent().calls
        0
    """

    calls: int = 0
    reserved: int = 0
    cost_usd: float = 0.0
    recorded: int = 0


@dataclass
class Stat:
    """One evaluator's results over a variant's runs: the mean and a 95% confidence interval.

    Attributes:
        mean: The mean (an assertion counts 1 when it passed).
        low: The interval's lower end (normal approximation, clipped to the values' range).
        high: Its upper end.
        n: How many results.

    Examples:
        >>> Stat.of([1, 1, 0, 1]).mean
        0.75
    """

    mean: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, values: Sequence[float]) -> "Stat":
        """The mean and interval of ``values``.

        Args:
            values: One number per run.

        Returns:
            Their ``Stat``.

        Examples:
            >>> s = Stat.of([0.0, 1.0])
            >>> round(s.low, 3), round(s.high, 3)
            (0.0, 1.0)
        """
        n = len(values)
        mean = statistics.fmean(values)
        half = 1.96 * statistics.stdev(values) / math.sqrt(n) if n > 1 else 0.0
        lo, hi = min(values), max(values)
        return cls(mean, max(lo, mean - half), min(hi, mean + half), n)

    def __str__(self) -> str:
        return f"{self.mean:.2f}" if self.n < 2 or self.low == self.high else \
            f"{self.mean:.2f} [{self.low:.2f}, {self.high:.2f}]"


@dataclass(repr=False)
class EvalResult:
    """An eval's results: one pydantic-evals report per variant, side by side.

    Attributes:
        name: The dataset's name.
        reports: Variant name -> its ``EvaluationReport`` (cases, scores, assertions, failures).
        calls: Model calls the eval made (0 when every run came from the cassette).
        recorded: Runs taken from the cassette.
        eval_id: The id of the eval's record in its ``checkpoint`` store (None without one).

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> ds = load_dataset([{"task": "Ship it?", "evaluators": [{"Contains": "yet"}]}])
        >>> result = Eval(ds, lambda: RoundRobinSwarm(agents=[lambda turn: "Not yet."], max_loops=1)).run()
        >>> result.ok, str(result.summary()["default"]["Contains"])
        (True, '1.00')
    """

    name: str
    reports: dict[str, EvaluationReport[Any, Any, Any]]
    calls: int = 0
    recorded: int = 0
    eval_id: str | None = None

    def __repr__(self) -> str:  # one short line (asyncio.run computes it as the eval ends)
        return (f"EvalResult(name={self.name!r}, variants={list(self.reports)}, "
                f"runs={sum(len(r.cases) for r in self.reports.values())}, calls={self.calls})")

    @property
    def ok(self) -> bool:
        """Every case of every variant ran (no run failed, no evaluator raised)."""
        return not self.failures()

    def failures(self) -> list[str]:
        """What did not run: ``variant / case: error``, one line each.

        Returns:
            The failed cases and evaluators.

        Examples:
            >>> EvalResult("d", {}).failures()
            []
        """
        out = [f"{v} / {f.name}: {f.error_message}" for v, r in self.reports.items() for f in r.failures]
        out += [f"{v} / {c.name}: evaluator {e.name} raised {e.error_message}" for v, r in self.reports.items()
                for c in r.cases for e in c.evaluator_failures]
        return out

    def summary(self) -> dict[str, dict[str, Stat]]:
        """Per variant, each evaluator's mean and 95% interval over all its runs (cases x repeats).

        Returns:
            Variant -> evaluator name -> ``Stat``.

        Examples:
            >>> EvalResult("d", {}).summary()
            {}
        """
        out: dict[str, dict[str, Stat]] = {}
        for variant, report in self.reports.items():
            values: dict[str, list[float]] = defaultdict(list)
            for case in report.cases:
                for name, r in {**case.assertions, **case.scores}.items():
                    values[name].append(float(r.value))
            out[variant] = {name: Stat.of(v) for name, v in values.items()}
        return out

    def table(self) -> str:
        """The summary as a plain-text table: one row per evaluator, one column per variant.

        Returns:
            The table.

        Examples:
            >>> EvalResult("d", {}).table()
            'evaluator'
        """
        summary = self.summary()
        names = list(dict.fromkeys(n for stats in summary.values() for n in stats))
        rows = [["evaluator", *summary]] + [[n, *(str(s[n]) if n in s else "-" for s in summary.values())]
                                            for n in names]
        if self.reports:
            rows.append(["failed runs", *(str(len(r.failures)) for r in self.reports.values())])
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)

    def print(self, **options: Any) -> None:
        """Print each variant's pydantic-evals report (the first variant as the others' baseline:
        score deltas per case), then the summary table.

        Args:
            **options: pydantic-evals' ``EvaluationReport.print`` options (``include_output=True``, ...).

        Examples:
            >>> EvalResult("d", {}).print()
            evaluator
        """
        first = next(iter(self.reports.values()), None)
        options = {"include_durations": False, **options}  # a duration's delta between variants is noise
        for report in self.reports.values():
            report.print(baseline=None if report is first else first, **options)
        print(self.table())

    def below(self, thresholds: Mapping[str, float]) -> list[str]:
        """The thresholds a variant misses (its mean under the threshold, or the evaluator absent).

        Args:
            thresholds: Evaluator name -> the lowest mean that passes.

        Returns:
            ``variant: name mean < threshold``, one line each; empty when all pass.

        Examples:
            >>> EvalResult("d", {}).below({"Contains": 0.9})
            []
        """
        out = []
        for variant, stats in self.summary().items():
            for name, low in thresholds.items():
                s = stats.get(name)
                if s is None:
                    out.append(f"{variant}: {name} has no results (evaluators: {', '.join(stats) or 'none'})")
                elif s.mean < low:
                    out.append(f"{variant}: {name} {s.mean:.2f} < {low}")
        return out

    def assert_passes(self, thresholds: Mapping[str, float] | None = None) -> None:
        """For your own tests: every case ran, and every threshold holds (``AssertionError`` saying which not).

        Args:
            thresholds: Evaluator name -> the lowest mean that passes.

        Raises:
            AssertionError: A case failed or a threshold was missed.

        Examples:
            >>> EvalResult("d", {}).assert_passes({})
        """
        problems = self.failures() + self.below(thresholds or {})
        assert not problems, f"eval {self.name!r}:\n" + "\n".join(problems) + "\n" + self.table()


@dataclass
class Eval:
    """A dataset run across variants of a conversation, each run scored by the dataset's evaluators.

    Attributes:
        dataset: pydantic-evals' ``Dataset`` (``load_dataset``), or what ``load_dataset`` takes.
        build: The factory: ``build(**variant_settings, **case.inputs)`` returns the pattern or flow
            a case runs (anything with ``aexecute(task)``).
        variants: Name -> the factory's keywords (``{"default": {}}`` when left out).
        repeat: Runs per case and variant (the mean and interval are over them).
        max_concurrency: Runs at once.
        cassette: A JSONL file of recorded runs: read first, appended as runs end (None: memory only).
        rescore: Only score recorded runs; a case without a recording fails, and no model is called.
        max_calls: The most model calls of the whole eval (a run starts when its worst case fits).
        max_cost_usd: The most the eval may spend (no run starts once it is spent).
        checkpoint: A store to keep every run in (``SqliteCheckpointer``/``PostgresCheckpointer``),
            and the eval's record as it ends (each case with its run's id), for ``fsmchat ui``'s
            evaluation pages; a store that does not keep evaluations (``capabilities.evals``) is refused.
        evaluators: More evaluators for every case (``Check(fn)``, a ``Judge``, ...).
        progress: Show pydantic-evals' progress bar (and each batch's, with an ``executor``).
        executor: None (the default): pydantic-evals' task runs each case itself, ``max_concurrency``
            at once. ``"local"`` or ``"ray"``: the runs the cassette lacks are made first through the
            batch runner (``execute_batch``), one batch per pattern config (the cases whose factory
            output has the same ``to_config`` share one), in this process or on Ray workers, and
            are then scored from the cassette. For Ray every variant's pattern must have a config
            (no lambda or closure in it: refused before any model call, naming the variant). With
            ``checkpoint`` the batches keep their runs in it under this eval's own ids
            (``eval-<dataset>-<id>-<wave>-<digest>``: ``execute_batch(run_id_prefix=...)``), so a later
            eval's runs never meet an earlier one's; on Ray the store must be a ``PostgresCheckpointer``
            opened with a ``postgresql://`` URI (every worker writes to it).
        address: The Ray cluster to join (``"auto"``, ``"ray://host:10001"``); None starts a local Ray
            (or uses the one this process is connected to). For ``executor="ray"`` only.
        max_concurrency_per_worker: Runs at once per worker (locally: in this process); None: ``max_concurrency``.
        batch_options: More of ``execute_batch``'s options, for Ray: ``workers``, ``chunk_size``,
            ``runtime_env``, ``worker_options``, ``max_chunk_attempts``.

    Examples:
        >>> from fsmchat import RoundRobinSwarm
        >>> from fsmchat.evals import SpeakersInOrder
        >>> ds = load_dataset([{"task": "Ship it?"}], evaluators=[SpeakersInOrder(["critic"])])
        >>> def build(reply="Not yet."):
        ...     def critic(turn):
        ...         return reply
        ...     return RoundRobinSwarm(agents=[critic], max_loops=1)
        >>> result = Eval(ds, build, variants={"no": {}, "yes": {"reply": "Yes."}}, repeat=2).run()
        >>> result.ok, [len(r.cases) for r in result.reports.values()]
        (True, [2, 2])
        >>> batched = Eval(ds, build, variants={"no": {}, "yes": {"reply": "Yes."}}, repeat=2, executor="local").run()
        >>> batched.table() == result.table()
        True
    """

    dataset: Any
    build: Callable[..., Any]
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {"default": {}})
    repeat: int = 1
    max_concurrency: int = 4
    cassette: str | Path | None = None
    rescore: bool = False
    max_calls: int | None = None
    max_cost_usd: float | None = None
    checkpoint: Checkpointer | None = None
    evaluators: Sequence[Evaluator[Any, Any, Any]] = ()
    progress: bool = False
    executor: str | None = None
    address: str | None = None
    max_concurrency_per_worker: int | None = None
    batch_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.dataset, Dataset):
            self.dataset = load_dataset(self.dataset)
        self.cases = cases_of(self.dataset)
        if not callable(self.build):
            raise ConfigTypeError(f"Eval(build={self.build!r:.80}) is invalid: a factory build(**settings) that "
                                  "returns a pattern or flow")
        if not isinstance(self.variants, Mapping) or not self.variants or not all(
                isinstance(k, str) and k and isinstance(v, Mapping) for k, v in self.variants.items()):
            raise ConfigTypeError(f"Eval(variants={self.variants!r:.120}) is invalid: a dict of name -> the "
                                  "factory's keywords, e.g. {'small': {'model': 'gpt-4o-mini'}}")
        for name, value, low in (("repeat", self.repeat, 1), ("max_concurrency", self.max_concurrency, 1),
                                 ("max_calls", self.max_calls, 0)):
            if value is not None or name != "max_calls":
                Count(low).check(value, "Eval", name)
        if self.max_cost_usd is not None and (isinstance(self.max_cost_usd, bool) or
                                              not isinstance(self.max_cost_usd, (int, float)) or self.max_cost_usd < 0):
            raise ConfigTypeError(f"Eval(max_cost_usd={self.max_cost_usd!r}) is invalid: a number >= 0, or None")
        check_checkpoint(self.checkpoint, "Eval")
        if self.checkpoint is not None and evals_of(self.checkpoint) is None:
            raise ConfigTypeError(f"Eval(checkpoint={type(self.checkpoint).__name__}(...)) is invalid: a store that "
                                  "keeps evaluations beside its runs (capabilities.evals: SqliteCheckpointer, "
                                  "PostgresCheckpointer, MemoryCheckpointer), so the eval's record links each case "
                                  "to its run")
        check_executor(self.executor, self.address, self.max_concurrency_per_worker, self.batch_options)
        if self.executor == "ray" and self.checkpoint is not None and not is_store_uri(getattr(self.checkpoint, "dsn",
                                                                                                    None)):
            raise ConfigTypeError(f"Eval(executor='ray', checkpoint={type(self.checkpoint).__name__}(...)) is invalid: "
                                  "Ray workers keep their runs in one store they all reach, a PostgresCheckpointer "
                                  "opened with a postgresql:// URI; or run the batches with executor='local'")
        for variant, settings in self.variants.items():  # every variant builds, before any model call
            for case in self.cases[:1]:
                pattern = self._build(variant, settings, case.inputs)
                if self.executor is not None:  # and can be batched (on Ray: has a config)
                    group_key(pattern, variant, settings, case.inputs, self.executor)

    def _build(self, variant: str, settings: Mapping[str, Any], inputs: CaseInputs) -> Any:
        try:
            pattern = self.build(**{**settings, **inputs.inputs})
        except TypeError as exc:
            raise ConfigTypeError(f"Eval: variant {variant!r}: build(**{dict(settings)!r:.120}) failed: {exc}") from None
        if not callable(getattr(pattern, "aexecute", None)):
            raise ConfigTypeError(f"Eval: build() returned {type(pattern).__name__}: a pattern or flow "
                                  "(something with aexecute(task))")
        return pattern

    def run(self) -> EvalResult:
        """Run the eval (see the class).

        Returns:
            The ``EvalResult``.

        Examples:
            >>> from fsmchat import RoundRobinSwarm
            >>> Eval([{"task": "Hi"}], lambda: RoundRobinSwarm(agents=[lambda t: "Hi."], max_loops=1)).run().ok
            True
        """
        return run_sync(self.arun)

    async def arun(self) -> EvalResult:
        """Run the eval in the running event loop (see the class).

        Returns:
            The ``EvalResult``.

        Examples:
            >>> import asyncio
            >>> from fsmchat import RoundRobinSwarm
            >>> e = Eval([{"task": "Hi"}], lambda: RoundRobinSwarm(agents=[lambda t: "Hi."], max_loops=1))
            >>> asyncio.run(e.arun()).ok
            True
        """
        cassette = Cassette(self.cassette)
        token = ACTIVE.set(cassette)  # a Judge keeps its grades in it too
        state = Spent()
        reports: dict[str, EvaluationReport[Any, Any, Any]] = {}
        runs: dict[str, dict[str, Trajectory]] = {}
        evaluators = [*self.dataset.evaluators, *self.evaluators]
        # the driver hands each task its case's own inputs object: case names and keys are looked up by it
        names = {id(c.inputs): c.name or "case" for c in self.cases}
        made: set[int] = set()
        refused: dict[str, deque[BaseException]] = defaultdict(deque)
        # the eval is a batch of runs: the collector tuned as run_batch tunes it (what was alive before, the
        # imports of pydantic-evals among it, left out of its scans; restored as the eval ends)
        try:
            with batch_collector(len(self.cases) * self.repeat * len(self.variants)):
                if self.executor is not None and not self.rescore:
                    await self._make_runs(cassette, state, made, refused)
                for variant, settings in self.variants.items():
                    kept = runs[variant] = {}
                    reports[variant] = await evaluate(
                        variant, self.dataset.name, self.cases, evaluators,
                        self._task(variant, settings, cassette, names, state, made, refused), repeat=self.repeat,
                        max_concurrency=self.max_concurrency, progress=self.progress, kept=kept)
        finally:
            ACTIVE.reset(token)
            cassette.close()
        result = EvalResult(self.dataset.name, reports, calls=state.calls, recorded=state.recorded)
        store = evals_of(self.checkpoint) if self.checkpoint is not None else None
        if store is not None:
            order = [c.name or f"Case {i}" for i, c in enumerate(self.cases, 1)]  # as pydantic-evals names them
            record = eval_record(self.dataset.name, self.variants, self.repeat, order, reports, runs, result.summary(),
                                 calls=state.calls, recorded=state.recorded)
            store.put_eval(record)
            result.eval_id = record.eval_id
        return result

    def _task(self, variant: str, settings: Mapping[str, Any], cassette: Cassette, names: dict[int, str],
              state: Spent, made: set[int],
              refused: dict[str, deque[BaseException]]) -> Callable[[CaseInputs], Awaitable[Trajectory]]:
        keys = {id(c.inputs): case_key(variant, settings, c.inputs) for c in self.cases}  # once per case, not per run

        async def task(inputs: CaseInputs) -> Trajectory:
            key = keys.get(id(inputs)) or case_key(variant, settings, inputs)
            run = cassette.take(key)
            if run is not None:
                if id(run) not in made:  # a run the batches made this eval is not a recording
                    state.recorded += 1
            else:
                if self.rescore:
                    raise EvalError(f"no recorded run of this case under variant {variant!r} in "
                                    f"{self.cassette or 'the cassette'} (rescore=True makes no model call)")
                if self.executor is not None:  # the batches made every run the cassette lacked, or said why not
                    if refused[key]:
                        raise refused[key].popleft()
                    raise EvalError(f"no run of this case was made under variant {variant!r}: the batches "
                                    "made fewer runs than the eval scores")
                case = names.get(id(inputs), "case")
                run = await self._run_one(variant, settings, inputs, case, state)
                cassette.record(key, variant, case, run)
            return run

        return task

    def _plan(self, cassette: Cassette) -> list[Batch]:
        """The runs the cassette lacks (per case key: repeats x the cases with that key, less its
        recordings), in batches by their pattern's config, the batches in the order of their first run."""
        need: Counter[str] = Counter()
        for variant, settings in self.variants.items():
            for case in self.cases:
                need[case_key(variant, settings, case.inputs)] += self.repeat
        missing = {key: max(0, n - cassette.left(key)) for key, n in need.items()}
        batches: dict[str, Batch] = {}
        executor = str(self.executor)
        for variant, settings in self.variants.items():
            for case in self.cases:
                key = case_key(variant, settings, case.inputs)
                n = min(self.repeat, missing[key])
                if n == 0:
                    continue
                missing[key] -= n
                pattern = self._build(variant, settings, case.inputs)
                batch = batches.setdefault(group_key(pattern, variant, settings, case.inputs, executor), Batch(pattern))
                batch.runs += [Wanted(variant, case.name or "case", key, case.inputs.task)] * n
        return list(batches.values())

    async def _make_runs(self, cassette: Cassette, state: Spent, made: set[int],
                         refused: dict[str, deque[BaseException]]) -> None:
        """Make the runs the cassette lacks through the batch runner and add them to it (see the class).

        Every batch is planned and preflighted (its tasks, limits and, locally, model keys) before
        the first model call; then each runs in waves: all its runs at once, or, with ``max_cost_usd``,
        ``max_concurrency_per_worker`` x workers at a time, no wave starting once the cost is spent.
        """
        batches = self._plan(cassette)
        executor = str(self.executor)
        for batch in batches:
            batch.pattern.preflight([r.task for r in batch.runs], credentials=executor == "local")
        per_worker = self.max_concurrency_per_worker or self.max_concurrency
        options = dict(self.batch_options)
        wave = None if self.max_cost_usd is None else per_worker * int(options.get("workers") or 1)
        store = None if self.checkpoint is None else self.checkpoint if executor == "local" else \
            getattr(self.checkpoint, "dsn")  # Ray's workers reach the PostgreSQL store by its URI
        # this eval's own run ids (each wave's a prefix of its own): a batch names runs by config, index and task
        prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"eval-{self.dataset.name}")[:60] + f"-{uuid.uuid4().hex[:8]}-"
        waves = 0
        with ray_session(executor, self.address, options.get("runtime_env")):
            for batch in batches:
                todo = deque(batch.runs)
                while todo:
                    admitted = self._admit(batch.pattern, todo, wave, state, refused)
                    if not admitted:
                        break
                    waves += 1
                    await run_wave(batch.pattern, [r.task for r in admitted], executor=executor,
                                   address=self.address, per_worker=per_worker, options=options,
                                   progress=self.progress,
                                   on_outcome=functools.partial(self._made, admitted, cassette, state, made, refused),
                                   checkpoint=store, run_id_prefix=f"{prefix}{waves}-" if store is not None else "")

    @staticmethod
    def _made(admitted: list[Wanted], cassette: Cassette, state: Spent, made: set[int],
              refused: dict[str, deque[BaseException]], outcome: TaskOutcome) -> None:
        """Keep one batch run as it ends: its trajectory joins the cassette (appended at once, so a
        killed eval keeps it), or why it has none is kept for its case. Called from the batch's
        thread while this eval's loop only awaits the wave, so nothing else touches these meanwhile."""
        want = admitted[outcome.index]
        if outcome.kept is None:  # it failed before it had a result (a lost worker, a bad task)
            state.calls += outcome.model_calls
            why = outcome.failure
            refused[want.key].append(EvalError(f"the run failed before it had a result: {why.error_type}: "
                                               f"{why.message}" if why is not None else
                                               "the run came back without its trajectory"))
            return
        run = Trajectory.model_validate(outcome.kept)
        state.calls += run.calls
        state.cost_usd += run.cost_usd or 0.0
        cassette.record(want.key, want.variant, want.case, run, taken=False)
        made.add(id(run))

    def _admit(self, pattern: Any, todo: deque[Wanted], wave: int | None, state: Spent,
               refused: dict[str, deque[BaseException]]) -> list[Wanted]:
        """The next runs of a batch the budget lets start (all of ``todo``, or a wave of it); when
        none fits, every run left is refused saying why, as the default path refuses one."""
        why = None
        n = len(todo) if wave is None else min(wave, len(todo))
        if self.max_cost_usd is not None and state.cost_usd >= self.max_cost_usd:
            why = f"the eval's max_cost_usd={self.max_cost_usd} is spent (${state.cost_usd:.4f}); this case did not run"
        elif self.max_calls is not None:
            bound = getattr(pattern, "max_calls", None)
            worst = int(bound()) if callable(bound) else 0
            left = self.max_calls - state.calls
            n = 0 if not callable(bound) else n if worst == 0 else min(n, left // worst)
            if n == 0:
                why = (f"the eval's max_calls={self.max_calls}: {left} call(s) left, and this run may make up to "
                       f"{worst if callable(bound) else 'an unknown number of'}; this case did not run")
        if why is not None:
            while todo:
                refused[todo.popleft().key].append(BudgetExceeded(why))
            return []
        return [todo.popleft() for _ in range(n)]

    async def _run_one(self, variant: str, settings: Mapping[str, Any], inputs: CaseInputs, case: str,
                       state: Spent) -> Trajectory:
        pattern = self._build(variant, settings, inputs)
        # the run's worst case is reserved out of what the budget has left: no await from the check to the
        # reservation, so no other case runs in between (no lock)
        worst = 0
        if self.max_cost_usd is not None and state.cost_usd >= self.max_cost_usd:
            raise BudgetExceeded(f"the eval's max_cost_usd={self.max_cost_usd} is spent "
                                 f"(${state.cost_usd:.4f}); this case did not run")
        if self.max_calls is not None:
            bound = getattr(pattern, "max_calls", None)
            worst = int(bound()) if callable(bound) else 0
            left = self.max_calls - state.calls - state.reserved
            if not callable(bound) or worst > left:
                raise BudgetExceeded(f"the eval's max_calls={self.max_calls}: {left} call(s) left, and this run "
                                     f"may make up to {worst if callable(bound) else 'an unknown number of'}; "
                                     "this case did not run")
            state.reserved += worst
        run_id = None
        if self.checkpoint is not None:
            run_id = re.sub(r"[^A-Za-z0-9_.-]+", "-", f"eval-{self.dataset.name}-{variant}-{case}")[:80] + \
                f"-{uuid.uuid4().hex[:8]}"
        try:
            result = await pattern.aexecute(inputs.task, checkpoint=self.checkpoint, run_id=run_id) \
                if self.checkpoint is not None else await pattern.aexecute(inputs.task)  # any aexecute(task) runs
        except BaseException as exc:  # a run that raised spent what its result so far says
            partial = result_of(exc)
            if partial is not None:
                state.calls += partial.calls
                state.cost_usd += partial.cost_usd or 0.0
            raise
        finally:
            state.reserved -= worst
        state.calls += result.calls
        state.cost_usd += result.cost_usd or 0.0
        return Trajectory.of(result)
