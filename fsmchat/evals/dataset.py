"""Datasets of conversations to evaluate: from YAML, JSON or JSONL files, or built in Python.

A case is a task (what the conversation is asked), optional keyword ``inputs`` for the factory
that builds the conversation, an expected output, metadata and its own evaluators. A file is
checked whole before any model call: an error names the file, the line and the field, and what is
allowed. The dataset is pydantic-evals' ``Dataset`` of ``Case``\\ s whose inputs are ``CaseInputs``.

    name: support triage            # optional; the file's stem otherwise
    evaluators: [{StoppedBecause: answered}, PathInGraph]
    cases:
      - name: refund
        task: "I was charged twice, please refund one."
        expected_output: refund
        evaluators: [{ToolCalled: {name: refund}}]

JSONL holds one case per line (the dataset's name is the file's stem; no dataset-wide evaluators).
"""
from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_evals import Case, Dataset
from pydantic_evals.evaluators import Evaluator

from ..errors import ConfigError
from .evaluators import EVALUATORS

MAX_CASES = 100_000
NodePath = tuple[int | str, ...]  # a YAML/JSON node's keys and indexes from the top


class CaseInputs(BaseModel):
    """What one case gives the conversation: its task, and keywords for the factory that builds it.

    Attributes:
        task: The task the conversation is asked.
        inputs: Keyword arguments of the factory for this case (merged over the variant's).

    Examples:
        >>> CaseInputs(task="Refund me.", inputs={"max_turns": 4}).task
        'Refund me.'
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    task: str = Field(min_length=1)
    inputs: dict[str, Any] = Field(default_factory=dict)

    def __str__(self) -> str:
        return self.task if not self.inputs else f"{self.task} {json.dumps(self.inputs, default=str)}"


class CaseSpec(BaseModel):
    """One case as a dataset file writes it.

    Attributes:
        name: A unique name (``case_<n>`` when left out).
        task: The task.
        inputs: The factory's keywords for this case.
        expected_output: What the output should be (``EqualsExpected`` compares it).
        metadata: Anything the report should carry.
        evaluators: This case's own evaluators, as pydantic-evals writes them (``Name``,
            ``{Name: argument}`` or ``{Name: {keyword: value}}``).

    Examples:
        >>> CaseSpec(task="Refund me.").expected_output is None
        True
    """

    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, min_length=1, max_length=200)
    task: str = Field(min_length=1)
    inputs: dict[str, object] = Field(default_factory=dict)
    expected_output: object = None
    metadata: dict[str, object] | None = None
    evaluators: list[object] = Field(default_factory=list)


class DatasetSpec(BaseModel):
    """A dataset file's top level.

    Attributes:
        name: The dataset's name (the file's stem when left out).
        cases: The cases.
        evaluators: The evaluators every case gets.

    Examples:
        >>> DatasetSpec(cases=[CaseSpec(task="Hi")]).cases[0].task
        'Hi'
    """

    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    cases: list[CaseSpec] = Field(min_length=1, max_length=MAX_CASES)
    evaluators: list[object] = Field(default_factory=list)


def _lines(text: str) -> dict[NodePath, int]:
    """Each YAML/JSON node's path (keys and indexes) -> its line (1-based), for error messages."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    found: dict[NodePath, int] = {}

    def walk(node: Any, path: NodePath) -> None:  # a yaml.Node (PyYAML has no types)
        found[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                found[path + (key.value,)] = key.start_mark.line + 1
                walk(value, path + (key.value,))
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, path + (i,))

    if root is not None:
        walk(root, ())
    return found


def _where(lines: dict[NodePath, int], loc: Sequence[int | str]) -> int | None:
    for k in range(len(loc), -1, -1):
        if tuple(loc[:k]) in lines:
            return lines[tuple(loc[:k])]
    return None


CASE_FIELDS = ("name", "task", "inputs", "expected_output", "metadata", "evaluators")
TOP_FIELDS = ("name", "cases", "evaluators")


def _invalid(source: str, exc: ValidationError, lines: dict[NodePath, int], offset: Sequence[int | str] = (),
             line: int | None = None) -> ConfigError:
    """One line per problem (at most 5): ``file:line: field: what is wrong``, a misspelt key with its closest name."""
    out = []
    for err in exc.errors()[:5]:
        loc = [*offset, *err["loc"]]
        at = line if line is not None else _where(lines, loc)
        field = ".".join(str(p) for p in loc) or "(the top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            allowed = CASE_FIELDS if "cases" in loc or offset or line is not None else TOP_FIELDS
            close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            msg = f"unknown key{f' (did you mean {close[0]!r}?)' if close else ''}; allowed: {', '.join(allowed)}"
        out.append(f"{source}{f':{at}' if at else ''}: {field}: {msg}")
    if len(exc.errors()) > 5:
        out.append(f"... and {len(exc.errors()) - 5} more")
    return ConfigError("\n".join(out))


def load_dataset(source: str | Path | dict[str, Any] | list[dict[str, Any]],
                 evaluators: Sequence[Evaluator[Any, Any, Any]] = ()) -> Dataset[CaseInputs, Any, Any]:
    """A dataset from a YAML, JSON or JSONL file, or from the same data in Python, checked whole.

    Args:
        source: A ``.yaml``/``.yml``/``.json``/``.jsonl`` path, a dict (a file's top level) or a list of cases.
        evaluators: More evaluators every case gets (Python objects: ``Check(fn)``, a ``Judge``, ...).

    Returns:
        pydantic-evals' ``Dataset``, its cases' inputs ``CaseInputs``.

    Raises:
        ConfigError: The file is missing or unreadable, or a case or evaluator is invalid: the
            message names the file, the line and the field.

    Examples:
        >>> ds = load_dataset([{"name": "hi", "task": "Say hi.", "evaluators": [{"Contains": "hi"}]}])
        >>> ds.name, ds.cases[0].inputs.task, type(ds.cases[0].evaluators[0]).__name__
        ('dataset', 'Say hi.', 'Contains')
    """
    name, where = "dataset", "dataset"
    lines: dict[NodePath, int] = {}
    if isinstance(source, (str, Path)):
        path = Path(source)
        where, name = str(path), path.stem
        if path.suffix not in (".yaml", ".yml", ".json", ".jsonl"):
            raise ConfigError(f"{path}: a dataset is a .yaml, .yml, .json or .jsonl file")
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path}: cannot read the dataset ({exc})") from None
        if path.suffix == ".jsonl":
            specs = []
            for i, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ConfigError(f"{path}:{i}: not JSON ({exc.msg} at column {exc.colno})") from None
                try:
                    specs.append(CaseSpec.model_validate(row))
                except ValidationError as exc:
                    raise _invalid(where, exc, {}, line=i) from None
                lines[("cases", len(specs) - 1)] = i
            if not specs:
                raise ConfigError(f"{path}: no cases (one JSON object per line)")
            spec = DatasetSpec(name=name, cases=specs)
        else:
            try:
                data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
            except (json.JSONDecodeError, yaml.YAMLError) as exc:
                raise ConfigError(f"{path}: not valid {path.suffix[1:].upper()}: {exc}") from None
            lines = _lines(text)
            spec = _spec(data, where, lines)
    else:
        spec = _spec({"cases": source} if isinstance(source, list) else source, where, lines)
    seen: set[str] = set()
    cases = []
    for i, c in enumerate(spec.cases):
        case_name = c.name or f"case_{i + 1}"
        if case_name in seen:
            at = _where(lines, ("cases", i, "name"))
            raise ConfigError(f"{where}{f':{at}' if at else ''}: cases.{i}.name: {case_name!r} is taken by an "
                              "earlier case; case names are unique")
        seen.add(case_name)
        cases.append({"name": case_name, "inputs": {"task": c.task, "inputs": c.inputs},
                      "expected_output": c.expected_output, "metadata": c.metadata, "evaluators": c.evaluators})
    data = {"name": spec.name or name, "cases": cases, "evaluators": spec.evaluators}
    try:
        dataset: Dataset[CaseInputs, Any, Any] = Dataset[CaseInputs, Any, Any].from_dict(
            data, custom_evaluator_types=EVALUATORS)
    except Exception as exc:  # pydantic-evals raises a ValueError, or an ExceptionGroup of them (3.11+)
        first = (getattr(exc, "exceptions", None) or [exc])[0]
        raise ConfigError(f"{where}: an evaluator is invalid: {str(first).split('. Valid choices')[0]}; "
                          "fsmchat's evaluators: "
                          f"{', '.join(e.__name__ for e in EVALUATORS)} (and pydantic-evals' Equals, "
                          "EqualsExpected, Contains, IsInstance, MaxDuration)") from None
    dataset.evaluators = [*dataset.evaluators, *evaluators]
    return dataset


def _spec(data: object, where: str, lines: dict[NodePath, int]) -> DatasetSpec:
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: a dataset is a mapping with 'cases' (a list of cases), not "
                          f"{type(data).__name__}")
    try:
        return DatasetSpec.model_validate(data)
    except ValidationError as exc:
        raise _invalid(where, exc, lines) from None


def cases_of(dataset: Dataset[CaseInputs, Any, Any]) -> list[Case[CaseInputs, Any, Any]]:
    """The dataset's cases, each checked to hold ``CaseInputs`` (a dataset built by hand may not).

    Args:
        dataset: A pydantic-evals dataset.

    Returns:
        Its cases.

    Raises:
        ConfigError: A case's inputs are not ``CaseInputs`` or a task string.

    Examples:
        >>> [c.inputs.task for c in cases_of(load_dataset([{"task": "Hi"}]))]
        ['Hi']
    """
    for case in dataset.cases:
        if isinstance(case.inputs, str):
            case.inputs = CaseInputs(task=case.inputs)
        elif not isinstance(case.inputs, CaseInputs):
            raise ConfigError(f"case {case.name!r}: inputs={case.inputs!r:.80} is invalid: a task string or "
                              "fsmchat.evals.CaseInputs(task=..., inputs={...})")
    return list(dataset.cases)
