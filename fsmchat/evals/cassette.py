"""Cassettes: the runs (and judges' grades) an eval recorded, so re-scoring makes no model call.

A cassette is a JSONL file, one line per finished run (``{"key", "variant", "case", "run"}``) or
judge's grade (``{"key", "grade"}``), appended and flushed as each ends: a killed eval loses only
the runs in flight, and the next eval with the same cassette takes the finished ones instead of
running them again. Each line is checked when read (a cassette is untrusted input).
"""
from __future__ import annotations

import json
from collections import defaultdict
from contextvars import ContextVar
from pathlib import Path
from typing import IO, Any

from pydantic import BaseModel, Field, ValidationError

from ..errors import ConfigError
from .trajectory import Trajectory


class Grade(BaseModel):
    """A judge's answer: a score from 0 to 1 and why.

    Attributes:
        score: 0 (fails the rubric) to 1 (meets it fully).
        reason: One or two sentences.

    Examples:
        >>> Grade(score=0.5, reason="Half right.").score
        0.5
    """

    score: float = Field(ge=0, le=1)
    reason: str


class Cassette:
    """Recorded runs by case key, read from and appended to a JSONL file (or kept in memory).

    Each eval takes a key's recordings in order (a repeated case takes one per repeat) and appends
    a new run as it ends, flushed, so a killed eval loses only the runs in flight. A ``Judge``'s
    grades are kept too, by rubric, model and conversation: re-scoring recorded runs with the same
    judge makes no model call.

    Args:
        path: The JSONL file (read when it exists, appended to), or None for memory only.

    Attributes:
        path: The file, or None for memory only.

    Examples:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "runs.jsonl"
        >>> first = Cassette(path)
        >>> first.record("k", "fast", "refund", Trajectory(output="Done."))
        >>> first.close()
        >>> again = Cassette(path)  # a later eval: the recorded run is taken once
        >>> again.take("k").output, again.take("k")
        ('Done.', None)
    """

    def __init__(self, path: str | Path | None = None):
        self.path = None if path is None else Path(path)
        self._runs: dict[str, list[Trajectory]] = defaultdict(list)
        self._taken: dict[str, int] = defaultdict(int)
        self._grades: dict[str, Grade] = {}
        self._file: IO[str] | None = None
        if self.path is not None and self.path.exists():
            for i, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    if "grade" in row:
                        self._grades[str(row["key"])] = Grade.model_validate(row["grade"])
                    else:
                        self._runs[str(row["key"])].append(Trajectory.model_validate(row["run"]))
                except (json.JSONDecodeError, KeyError, TypeError, ValidationError) as exc:
                    raise ConfigError(f"{self.path}:{i}: not a recorded run or grade ({type(exc).__name__}: "
                                      f"{str(exc)[:200]}); a cassette line is {{\"key\", \"variant\", \"case\", "
                                      "\"run\"}} or {{\"key\", \"grade\"}}") from None

    def __len__(self) -> int:
        return sum(len(v) for v in self._runs.values())

    def take(self, key: str) -> Trajectory | None:
        """The next recording of ``key`` this eval has not used, or None.

        Args:
            key: A case key (``case_key``).

        Returns:
            The recorded run, or None when there is none left.

        Examples:
            >>> Cassette().take("missing") is None
            True
        """
        runs, n = self._runs.get(key, []), self._taken[key]
        if n >= len(runs):
            return None
        self._taken[key] = n + 1
        return runs[n]

    def left(self, key: str) -> int:
        """How many recordings of ``key`` this eval has not taken yet.

        Args:
            key: A case key (``case_key``).

        Returns:
            The count.

        Examples:
            >>> c = Cassette()
            >>> c.record("k", "fast", "refund", Trajectory(output="Done."), taken=False)
            >>> c.left("k"), c.left("other")
            (1, 0)
        """
        return len(self._runs.get(key, ())) - self._taken.get(key, 0)

    def record(self, key: str, variant: str, case: str, run: Trajectory, *, taken: bool = True) -> None:
        """Keep a finished run (and append it to the file, flushed).

        Args:
            key: Its case key.
            variant: The variant's name (for a reader of the file).
            case: The case's name (likewise).
            run: The run.
            taken: The eval that made it has used it already; False: a later ``take`` of the key
                returns it (``Eval(executor=...)`` makes its runs first, then scores them from here).

        Examples:
            >>> c = Cassette()
            >>> c.record("k", "fast", "refund", Trajectory(output="Done."))
            >>> len(c), c.take("k")
            (1, None)
        """
        self._runs[key].append(run)
        if taken:
            self._taken[key] += 1
        if self.path is not None:  # a cassette in memory keeps the run itself, never its JSON
            self._append({"key": key, "variant": variant, "case": case, "run": run.model_dump(mode="json")})

    def grade(self, key: str) -> Grade | None:
        """A judge's recorded grade of ``key`` (the rubric, the judge's model and the conversation), or None.

        Args:
            key: The grade's key.

        Returns:
            The grade, or None.

        Examples:
            >>> Cassette().grade("k") is None
            True
        """
        return self._grades.get(key)

    def record_grade(self, key: str, grade: Grade) -> None:
        """Keep a judge's grade (and append it to the file, flushed).

        Args:
            key: The grade's key.
            grade: The grade.

        Examples:
            >>> c = Cassette()
            >>> c.record_grade("k", Grade(score=1, reason="Resolved."))
            >>> c.grade("k").reason
            'Resolved.'
        """
        self._grades[key] = grade
        self._append({"key": key, "grade": grade.model_dump(mode="json")})

    def _append(self, row: dict[str, Any]) -> None:
        if self.path is not None:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(json.dumps(row, ensure_ascii=False) + "\n")
            self._file.flush()

    def close(self) -> None:
        """Close the file.

        Examples:
            >>> Cassette().close()
        """
        if self._file is not None:
            self._file.close()
            self._file = None


ACTIVE: ContextVar[Cassette | None] = ContextVar("fsmchat_eval_cassette", default=None)
"""The running eval's cassette (``Eval.arun`` sets it), where a ``Judge`` looks its grades up."""
