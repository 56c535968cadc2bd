"""Every python block of docs/testing.md runs, as the user would run it (pytest in a fresh folder)."""
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_testing_tutorial_examples_pass(tmp_path):
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "testing.md").read_text(), re.S)
    assert len(blocks) >= 6
    (tmp_path / "workflow.py").write_text(blocks[0])
    for i, block in enumerate(blocks[1:], 1):
        (tmp_path / f"test_doc_{i}.py").write_text(block)
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert re.search(rf"\b{len(blocks) - 1} passed\b", r.stdout), r.stdout[-500:]
