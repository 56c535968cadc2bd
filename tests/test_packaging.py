"""The wheel users install carries what type checkers need (PEP 561 ``py.typed``)."""
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_is_typed(tmp_path):
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
                        "-q", "-w", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    [wheel] = tmp_path.glob("fsmchat-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "fsmchat/py.typed" in names and "fsmchat/engine.py" in names
