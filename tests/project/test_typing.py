"""mypy checks fsmchat/ with the strict configuration of pyproject.toml ([tool.mypy]) and finds
nothing; every ``# type: ignore`` names its error code and says why."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def mypy(*args: str, cwd: Path = ROOT, cache: Path = ROOT / ".mypy_cache") -> subprocess.CompletedProcess[str]:
    """``python -m mypy`` of this interpreter (offline: it reads only installed packages). The cache
    makes a second run a matter of seconds; a cold one takes about 15 s. A file outside the
    repository finds fsmchat through ``MYPYPATH`` (an editable install's import hook is invisible
    to mypy)."""
    env = {**os.environ, "MYPYPATH": str(ROOT)} if cwd != ROOT else None
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env)


def test_mypy_finds_no_errors_in_fsmchat():
    r = mypy()
    assert r.returncode == 0, f"mypy (pyproject.toml [tool.mypy]) found errors:\n{r.stdout[-6000:]}{r.stderr[-2000:]}"
    assert re.search(r"^Success: no issues found in \d+ source files$", r.stdout, re.M), r.stdout


def test_the_configuration_is_strict(tmp_path):
    """The rules broken on purpose in a file checked with the package's configuration."""
    bad = tmp_path / "bad.py"
    bad.write_text("def untyped(x):\n    return x\n\n\n"
                   "def typed(x: int) -> str:\n    return x\n\n\n"
                   "y = 1  # type: ignore\n")
    r = mypy("--config-file", str(PYPROJECT), str(bad), cwd=tmp_path, cache=tmp_path / "cache")
    assert r.returncode == 1
    found = re.findall(r"^bad\.py:(\d+): error: .*\[([a-z-]+)\]$", r.stdout, re.M)
    assert ("1", "no-untyped-def") in found, r.stdout
    assert ("6", "return-value") in found, r.stdout
    assert ("9", "ignore-without-code") in found or ("9", "unused-ignore") in found, r.stdout


def test_every_type_ignore_names_its_code_and_says_why():
    bare = []
    for path in sorted((ROOT / "fsmchat").rglob("*.py")):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if "# type: ignore" in line and not re.search(r"# type: ignore\[[\w, -]+\]  # \S", line):
                bare.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert bare == [], "write # type: ignore[code]  # why, or fix the type:\n" + "\n".join(bare)


WRONG_CONTEXT = '''\
from dataclasses import dataclass

from fsmchat.graph import StateGraph
from fsmchat.patterns import ChatContext


@dataclass
class Tally:
    votes: int = 0


def count(ctx: Tally) -> None:
    ctx.votes += 1


def enough(ctx: Tally) -> bool:
    return ctx.votes >= 3


def has_speakers(ctx: ChatContext) -> bool:
    return bool(ctx.speakers)


g = StateGraph("tally", context=Tally).state("count", count).final("done")
g.edge("count", "done", when=enough)
g.edge("count", "done", when=has_speakers)
chat = StateGraph("chat", context=ChatContext).state("seed", ChatContext.seed).state("count", count)
reveal_type(g)
'''


def test_a_guard_or_action_written_for_another_context_is_refused(tmp_path):
    """``StateGraph("g", context=Tally)`` is a ``StateGraph[Tally]``: a guard over a ``ChatContext``
    (line 26) and an action over a ``Tally`` on a ``ChatContext`` graph (line 27) are type errors;
    the right ones (lines 24-25) are not."""
    (tmp_path / "wrong_context.py").write_text(WRONG_CONTEXT)
    r = mypy("--config-file", str(PYPROJECT), "wrong_context.py", cwd=tmp_path, cache=ROOT / ".mypy_cache")
    assert r.returncode == 1, r.stdout + r.stderr
    errors = re.findall(r"^wrong_context\.py:(\d+): (?:error|note): (.*)$", r.stdout, re.M)
    assert errors == [
        ("26", 'Argument "when" to "edge" of "StateGraph" has incompatible type "Callable[[ChatContext], bool]"; '
               'expected "Callable[[Tally], bool] | None"  [arg-type]'),
        ("27", 'Argument 2 to "state" of "StateGraph" has incompatible type "Callable[[Tally], None]"; '
               'expected "Callable[[ChatContext], object] | None"  [arg-type]'),
        ("28", 'Revealed type is "fsmchat.graph.state_graph.StateGraph[wrong_context.Tally]"'),
    ], r.stdout
