"""Evaluators of fsmchat runs, on pydantic-evals' ``Evaluator``: the output, and the trajectory.

Output evaluators read the run's output text (``ctx.output``), as pydantic-evals' own do
(``Equals``, ``EqualsExpected``, ``Contains`` work unchanged on it). Trajectory evaluators read what
only fsmchat knows of the run (``ctx.attributes["fsmchat"]``, a ``Trajectory``): who spoke in
order, which tools were called with which arguments, which states were visited, the stop reason,
calls, tokens and cost, and whether the path is a path of the drawn graph.

Each returns an ``EvaluationReason``: a bool (an assertion) or a number (a score) with the reason
a reader needs when it fails. Every one can be named in a dataset file (``evaluators: [{ToolCalled:
{name: refund}}]``) but ``Check``, which takes a Python function.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import jsonschema
from pydantic import ValidationError
from pydantic_evals.evaluators import EvaluationReason, Evaluator, EvaluatorContext

from ..errors import ConfigError
from ..models import Message
from ..speakers.agent import Agent, Turn
from ..speakers.llm import CallStats
from .cassette import ACTIVE, Grade
from .trajectory import Trajectory

Context = EvaluatorContext[object, object, object]  # any case's context (its types are covariant)


def trajectory_of(ctx: Context) -> Trajectory:
    """The run an evaluator scores (``ctx.attributes["fsmchat"]``).

    Args:
        ctx: pydantic-evals' evaluator context of one case.

    Returns:
        The case's run, as a ``Trajectory``.

    Raises:
        ConfigError: The case was not run by ``fsmchat.evals.Eval`` (no run to read).

    Examples:
        >>> from pydantic_evals.evaluators import EvaluatorContext
        >>> ctx = EvaluatorContext(name="c", inputs="Hi", metadata=None, expected_output=None, output="Hello.",
        ...                        duration=0.0, _span_tree=None, attributes={"fsmchat": Trajectory(output="Hello.")},
        ...                        metrics={})
        >>> trajectory_of(ctx).output
        'Hello.'
    """
    found = ctx.attributes.get("fsmchat")
    if isinstance(found, Trajectory):
        return found
    if isinstance(found, dict):
        return Trajectory.model_validate(found)
    raise ConfigError("a trajectory evaluator scores an fsmchat run: evaluate the dataset with fsmchat.evals.Eval "
                      "(its task records each run's trajectory)")


class _Named:
    """The name a report shows for an evaluator: ``evaluation_name``, else the class and its key argument."""

    evaluation_name: str | None
    key: str = ""

    def get_default_evaluation_name(self) -> str:
        if self.evaluation_name:
            return self.evaluation_name
        value = getattr(self, self.key, None) if self.key else None
        return f"{type(self).__name__}({value})" if value not in (None, "", [], ()) else type(self).__name__


@dataclass(repr=False)
class Regex(_Named, Evaluator[object, object, object]):
    """The output matches a regular expression (``re.search``).

    Attributes:
        pattern: The expression.
        ignore_case: Match case-insensitively.
        evaluation_name: The name in reports (default ``Regex(<pattern>)``).

    Examples:
        >>> Regex(r"refund(ed)?").pattern
        'refund(ed)?'
    """

    pattern: str
    ignore_case: bool = False
    evaluation_name: str | None = field(default=None)
    key = "pattern"

    def __post_init__(self) -> None:
        try:
            re.compile(self.pattern)
        except (re.error, TypeError) as exc:
            raise ConfigError(f"Regex(pattern={self.pattern!r}) is invalid: {exc}; give a Python regular "
                              "expression") from None

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        found = re.search(self.pattern, str(ctx.output), re.I if self.ignore_case else 0)
        return EvaluationReason(found is not None,
                                reason=None if found else f"no match for {self.pattern!r} in {str(ctx.output)[:100]!r}")


@dataclass(repr=False)
class MatchesSchema(_Named, Evaluator[object, object, object]):
    """The output is JSON valid against a JSON Schema (checked against the metaschema when built).

    Attributes:
        schema: The JSON Schema.
        evaluation_name: The name in reports (default ``MatchesSchema``).

    Examples:
        >>> MatchesSchema({"type": "object", "required": ["team"]}).schema["required"]
        ['team']
    """

    schema: dict[str, object]
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.schema, dict):
            raise ConfigError(f"MatchesSchema(schema={self.schema!r:.80}) is invalid: a JSON Schema (a dict)")
        try:
            jsonschema.validators.validator_for(self.schema).check_schema(self.schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.path) or "(the root)"
            raise ConfigError(f"MatchesSchema(schema=...) is invalid at {where}: {exc.message}") from None

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        try:
            data = json.loads(str(ctx.output))
        except json.JSONDecodeError as exc:
            return EvaluationReason(False, reason=f"the output is not JSON: {exc}")
        errors = sorted(jsonschema.validators.validator_for(self.schema)(self.schema).iter_errors(data),
                        key=lambda e: list(e.path))
        if errors:
            where = "/".join(str(p) for p in errors[0].path) or "(the root)"
            return EvaluationReason(False, reason=f"at {where}: {errors[0].message}")
        return EvaluationReason(True)


@dataclass(repr=False)
class Check(_Named, Evaluator[object, object, object]):
    """A plain Python function of the output and the run: ``fn(output, run) -> bool | float | (value, reason)``.

    Attributes:
        fn: The function; ``run`` is the case's ``Trajectory``.
        evaluation_name: The name in reports (default the function's name).

    Examples:
        >>> def polite(output, run):
        ...     return "please" in output.lower()
        >>> Check(polite).get_default_evaluation_name()
        'polite'
    """

    fn: Callable[[str, Trajectory], object]
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"Check(fn={self.fn!r:.80}) is invalid: a function fn(output, run)")

    def get_default_evaluation_name(self) -> str:
        """The name in reports: ``evaluation_name``, else the function's name."""
        return self.evaluation_name or str(getattr(self.fn, "__name__", "Check"))

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        value = self.fn(str(ctx.output), trajectory_of(ctx))
        if isinstance(value, tuple) and len(value) == 2:
            return EvaluationReason(value[0], reason=str(value[1]))
        if not isinstance(value, (bool, int, float)):
            raise TypeError(f"Check({self.get_default_evaluation_name()}) returned {type(value).__name__}: return a "
                            "bool, a number or (value, reason)")
        return EvaluationReason(value)


@dataclass(repr=False)
class SpeakersInOrder(_Named, Evaluator[object, object, object]):
    """These speakers spoke in this order (others may speak between them; ``exact``: only they, exactly so).

    Attributes:
        names: The speakers, in order.
        exact: The run's speakers are exactly ``names``.
        evaluation_name: The name in reports.

    Examples:
        >>> SpeakersInOrder(["Triage", "Billing"]).get_default_evaluation_name()
        "SpeakersInOrder(['Triage', 'Billing'])"
    """

    names: list[str]
    exact: bool = False
    evaluation_name: str | None = field(default=None)
    key = "names"

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        spoke = trajectory_of(ctx).speakers
        if self.exact:
            ok = spoke == list(self.names)
        else:
            rest = iter(spoke)
            ok = all(any(s == name for s in rest) for name in self.names)
        return EvaluationReason(ok, reason=None if ok else f"spoke: {' -> '.join(spoke) or '(nobody)'}")


@dataclass(repr=False)
class SpeakersAre(_Named, Evaluator[object, object, object]):
    """The set of speakers is exactly ``names`` (in any order, any number of times).

    Attributes:
        names: The speakers.
        evaluation_name: The name in reports.

    Examples:
        >>> SpeakersAre(["Triage", "Billing"]).names
        ['Triage', 'Billing']
    """

    names: list[str]
    evaluation_name: str | None = field(default=None)
    key = "names"

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        spoke = set(trajectory_of(ctx).speakers)
        ok = spoke == set(self.names)
        return EvaluationReason(ok, reason=None if ok else f"spoke: {sorted(spoke)}")


def _matches(arguments: object, want: object) -> bool:
    if callable(want):
        return bool(want(arguments))
    if isinstance(want, Mapping):
        return isinstance(arguments, Mapping) and all(k in arguments and _matches(arguments[k], v)
                                                      for k, v in want.items())
    return bool(arguments == want)


@dataclass(repr=False)
class ToolCalled(_Named, Evaluator[object, object, object]):
    """A tool was called (by ``speaker``, when given) with arguments that match ``arguments``.

    ``arguments`` is a dict the call's arguments must contain (values compared, nested dicts
    likewise, a value may be a predicate) or a predicate of the whole arguments; ``times`` asks
    for exactly that many matching calls; ``called=False`` asks that no matching call was made.

    Attributes:
        name: The tool's name.
        arguments: What the arguments must match, or None for any.
        speaker: Who must have called it, or None for anyone.
        times: Exactly this many matching calls, or None for at least one.
        called: False to assert no matching call.
        evaluation_name: The name in reports.

    Examples:
        >>> ToolCalled("refund", arguments={"amount": 20}).get_default_evaluation_name()
        'ToolCalled(refund)'
    """

    name: str
    arguments: object = None
    speaker: str | None = None
    times: int | None = None
    called: bool = True
    evaluation_name: str | None = field(default=None)
    key = "name"

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        tools = trajectory_of(ctx).tools
        hits = [t for t in tools if t.name == self.name and (self.speaker is None or t.speaker == self.speaker)
                and (self.arguments is None or _matches(t.arguments, self.arguments))]
        ok = (len(hits) == self.times if self.times is not None else bool(hits)) if self.called else not hits
        seen = ", ".join(f"{t.speaker}: {t.name}({json.dumps(t.arguments, default=str)[:80]})" for t in tools)
        return EvaluationReason(ok, reason=None if ok else
                                f"{len(hits)} matching call(s); calls made: {seen or '(none)'}")


@dataclass(repr=False)
class Visited(_Named, Evaluator[object, object, object]):
    """The run went through a state (``avoided=True``: it never did).

    Attributes:
        state: The state's (qualified) name.
        avoided: Assert the run never entered it.
        evaluation_name: The name in reports.

    Examples:
        >>> Visited("tools_Billing").state
        'tools_Billing'
    """

    state: str
    avoided: bool = False
    evaluation_name: str | None = field(default=None)
    key = "state"

    def get_default_evaluation_name(self) -> str:
        """The name in reports: ``evaluation_name``, else ``Visited(<state>)`` or ``Avoided(<state>)``."""
        return self.evaluation_name or f"{'Avoided' if self.avoided else 'Visited'}({self.state})"

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        path = trajectory_of(ctx).path
        ok = (self.state in path) != self.avoided
        return EvaluationReason(ok, reason=None if ok else f"path: {' -> '.join(path)}")


@dataclass(repr=False)
class StoppedBecause(_Named, Evaluator[object, object, object]):
    """The run stopped for this reason (``answered``, ``max_loops``, ``lull``, ...).

    Attributes:
        reason: The stop reason (or a list of accepted ones).
        evaluation_name: The name in reports.

    Examples:
        >>> StoppedBecause("answered").get_default_evaluation_name()
        'StoppedBecause(answered)'
    """

    reason: str | list[str]
    evaluation_name: str | None = field(default=None)
    key = "reason"

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        got = trajectory_of(ctx).stop_reason
        ok = got in ([self.reason] if isinstance(self.reason, str) else self.reason)
        return EvaluationReason(ok, reason=None if ok else f"stopped: {got}")


@dataclass(repr=False)
class WithinBudget(_Named, Evaluator[object, object, object]):
    """The run made at most ``max_calls`` model calls, used at most ``max_tokens`` and cost at most ``max_cost_usd``.

    Attributes:
        max_calls: The most model calls, or None.
        max_tokens: The most tokens, or None.
        max_cost_usd: The most cost in US dollars, or None (a run of unknown cost fails it).
        evaluation_name: The name in reports.

    Examples:
        >>> WithinBudget(max_calls=4).max_calls
        4
    """

    max_calls: int | None = None
    max_tokens: int | None = None
    max_cost_usd: float | None = None
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        if self.max_calls is None and self.max_tokens is None and self.max_cost_usd is None:
            raise ConfigError("WithinBudget() is invalid: give max_calls, max_tokens or max_cost_usd")

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        run = trajectory_of(ctx)
        over = []
        if self.max_calls is not None and run.calls > self.max_calls:
            over.append(f"{run.calls} calls > {self.max_calls}")
        if self.max_tokens is not None and run.tokens > self.max_tokens:
            over.append(f"{run.tokens} tokens > {self.max_tokens}")
        if self.max_cost_usd is not None and (run.cost_usd is None or run.cost_usd > self.max_cost_usd):
            over.append(f"cost {'unknown' if run.cost_usd is None else f'${run.cost_usd:.4f}'} > "
                        f"${self.max_cost_usd:.4f}")
        return EvaluationReason(not over, reason="; ".join(over) or None)


@dataclass(repr=False)
class PathInGraph(_Named, Evaluator[object, object, object]):
    """The run's path is a path of the drawn graph: each step follows one of its transitions.

    Attributes:
        evaluation_name: The name in reports.

    Examples:
        >>> PathInGraph().get_default_evaluation_name()
        'PathInGraph'
    """

    evaluation_name: str | None = field(default=None)

    def evaluate(self, ctx: Context) -> EvaluationReason:
        """Score one case (pydantic-evals calls it with the case's context)."""
        run = trajectory_of(ctx)
        if not run.edges:
            return EvaluationReason(False, reason="the run kept no graph to check its path against")
        edges = set(map(tuple, run.edges))
        off = [(a, b) for a, b in zip(run.path, run.path[1:]) if (a, b) not in edges]
        return EvaluationReason(not off, reason=None if not off else
                                f"no transition {off[0][0]!r} -> {off[0][1]!r} in the drawn graph")


GRADE_TOOL = {"type": "function", "function": {
    "name": "grade", "description": "Grade the conversation against the rubric.",
    "parameters": {"type": "object", "additionalProperties": False, "required": ["score", "reason"], "properties": {
        "score": {"type": "number", "minimum": 0, "maximum": 1,
                  "description": "0 when the conversation fails the rubric, 1 when it meets it fully"},
        "reason": {"type": "string", "description": "why, in one or two sentences"}}}}}


@dataclass(repr=False)
class Judge(_Named, Evaluator[object, object, object]):
    """An LLM judge: a model grades the conversation against a rubric through a forced ``grade`` tool.

    The answer is typed (a score from 0 to 1 and a reason), never parsed from prose; an answer that
    is not a valid grade is asked again once, then the evaluator fails with the reason. In an
    ``Eval`` the grade is kept in the cassette (by rubric, model and conversation), so re-scoring the
    same runs with the same judge makes no model call. With
    ``threshold`` the result is an assertion (score >= threshold), else the score.

    Attributes:
        rubric: What a good conversation does.
        model: The judge's model (any litellm name, an OpenAI-compatible endpoint, ``"offline"``).
        threshold: Pass at this score or above, or None to report the score.
        api_base: The judge's endpoint, for an OpenAI-compatible server.
        api_key: Its key.
        evaluation_name: The name in reports (default ``Judge``).

    Examples:
        >>> Judge("The reply resolves the customer's refund.", threshold=0.5).model
        'offline'
    """

    rubric: str
    model: str = "offline"
    threshold: float | None = None
    api_base: str | None = None
    api_key: str | None = field(default=None, repr=False)
    evaluation_name: str | None = field(default=None)

    def __post_init__(self) -> None:
        if not isinstance(self.rubric, str) or not self.rubric.strip():
            raise ConfigError("Judge(rubric=...) is invalid: say what a good conversation does")
        if self.threshold is not None and (isinstance(self.threshold, bool) or
                                           not isinstance(self.threshold, (int, float)) or
                                           not 0 <= self.threshold <= 1):
            raise ConfigError(f"Judge(threshold={self.threshold!r}) is invalid: a number from 0 to 1, or None")

    def agent(self) -> Agent:
        """The judge's agent.

        Returns:
            An ``Agent`` named ``judge`` on ``model``.

        Examples:
            >>> Judge("Polite.").agent().name
            'judge'
        """
        return Agent("judge", model=self.model, api_base=self.api_base, api_key=self.api_key,
                     system_prompt="You grade conversations against a rubric, strictly and briefly.")

    async def evaluate(self, ctx: Context) -> EvaluationReason:
        """Grade one case (pydantic-evals calls it with the case's context)."""
        run = trajectory_of(ctx)
        cassette = ACTIVE.get()
        key = "judge-" + hashlib.sha256(json.dumps([self.rubric, self.model, self.api_base, run.transcript],
                                                   sort_keys=True).encode()).hexdigest()[:32]
        grade = cassette.grade(key) if cassette is not None else None
        if grade is None:
            grade = await self._ask(run)
            if cassette is not None:
                cassette.record_grade(key, grade)
        if self.threshold is None:
            return EvaluationReason(grade.score, reason=grade.reason)
        return EvaluationReason(grade.score >= self.threshold, reason=f"{grade.score:.2f}: {grade.reason}")

    async def _ask(self, run: Trajectory) -> Grade:
        rows = [Message(role=m["role"], content=m["content"]) for m in run.transcript]
        ask = f"Rubric: {self.rubric}\nGrade the conversation above against the rubric with the grade tool."
        judge, why, grade = self.agent(), "", None
        for _ in range(2):
            message = await judge.choose(Turn("judge", rows, ask + why, stats=CallStats()), GRADE_TOOL)
            calls = getattr(message, "tool_calls", None) or []
            try:
                grade = Grade.model_validate_json(calls[0].function.arguments if calls else "")
                break
            except ValidationError as exc:
                why = f"\nYour last answer was not a valid grade ({exc.errors()[0]['msg']}); call the grade tool."
        if grade is None:
            raise ValueError(f"Judge: the model gave no valid grade in 2 calls: {why.strip()}")
        return grade


EVALUATORS: Sequence[type[Evaluator[object, object, object]]] = (
    Regex, MatchesSchema, SpeakersInOrder, SpeakersAre, ToolCalled, Visited, StoppedBecause, WithinBudget,
    PathInGraph, Judge)
"""The evaluators a dataset file may name, beside pydantic-evals' own (``Equals``, ``Contains``, ...)."""
