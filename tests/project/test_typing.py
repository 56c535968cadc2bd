"""mypy checks fsmchat/ with the strict configuration of pyproject.toml ([tool.mypy]) and finds
nothing; every ``# type: ignore`` names its error code and says why."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "pyproject.toml"


def mypy(*args: str, cwd: Path = ROOT, cache: Path = ROOT / ".mypy_cache") -> subprocess.CompletedProcess[str]:
    """``python -m mypy`` of this interpreter (offline: it reads only installed packages). The cache
    makes a second run a matter of seconds; a cold one takes about 15 s."""
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


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
