"""The wheel users install carries what type checkers need (PEP 561 ``py.typed``)."""
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_is_typed(tmp_path):
    src = tmp_path / "src"  # a clean copy: an in-tree build/ left by an earlier build cannot leak in
    shutil.copytree(ROOT / "fsmchat", src / "fsmchat", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "-q", "-w", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [wheel] = tmp_path.glob("fsmchat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fsmchat/py.typed" in names and "fsmchat/engine.py" in names
    assert {"fsmchat/ui/static/viewer.js", "fsmchat/ui/static/viewer.css"} <= set(names)  # the run viewer's assets
