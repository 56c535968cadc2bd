"""The documentation site (mkdocs.yml): it builds in strict mode, offline, with the README as its home
page and an API reference written from the docstrings; a broken reference fails the build."""
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

# imported first by every Python the build starts: any attempt to open a network connection fails it
NO_NETWORK = textwrap.dedent('''
    import socket

    def _refuse(*args, **kwargs):
        raise OSError("the documentation build tried to reach the network")

    socket.socket.connect = _refuse
    socket.socket.connect_ex = _refuse
    socket.create_connection = _refuse
    socket.getaddrinfo = _refuse
''')


def build(tmp_path: Path, config: Path, site: Path) -> subprocess.CompletedProcess:
    guard = tmp_path / "guard"
    guard.mkdir(exist_ok=True)
    (guard / "sitecustomize.py").write_text(NO_NETWORK)
    env_path = [str(guard), str(ROOT), *[p for p in sys.path if p.endswith("-packages") or "docsdeps" in p]]
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": ":".join(env_path), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"})


def test_the_site_builds_strictly_and_offline(tmp_path):
    site = tmp_path / "site"
    t0 = time.perf_counter()
    r = build(tmp_path, ROOT / "mkdocs.yml", site)
    took = time.perf_counter() - t0
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "WARNING" not in r.stderr, r.stderr[-3000:]
    print(f"mkdocs build --strict: {took:.1f} s")
    home = (site / "index.html").read_text()
    assert "runs multi-agent LLM conversations as explicit state graphs" in home  # the README's text
    assert 'src="viewer.png"' in home and (site / "viewer.png").is_file()  # its docs/ link, rewritten
    arch = (site / "architecture" / "index.html").read_text()
    assert 'src="../diagrams/layers.svg"' in arch and (site / "diagrams" / "layers.svg").is_file()
    engine = (site / "reference" / "engine" / "index.html").read_text()
    for name in ("GraphRun", "run_graph", "run_sync"):
        assert f'id="fsmchat.engine.{name}"' in engine, name
    for page in ("models", "graph", "speakers", "patterns", "flow", "network", "checkpoint", "config", "testing",
                 "ui"):
        assert (site / "reference" / page / "index.html").is_file(), page
    assert not list(site.rglob("*.py")), "scripts in docs/ are not pages"


def test_a_broken_reference_fails_the_strict_build(tmp_path):
    """The same settings on one page with a cross-reference to a name that does not exist."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Page\n\nSee [the runner][fsmchat.engine.NoSuchRunner].\n\n"
                                   "::: fsmchat.engine.run_sync\n")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    config.update(docs_dir=str(docs), nav=["index.md"], hooks=[])
    config["plugins"][1]["mkdocstrings"]["handlers"]["python"]["paths"] = [str(ROOT)]
    (tmp_path / "mkdocs.yml").write_text(yaml.safe_dump(config))
    r = build(tmp_path, tmp_path / "mkdocs.yml", tmp_path / "site")
    assert r.returncode != 0
    assert "fsmchat.engine.NoSuchRunner" in r.stderr, r.stderr[-3000:]
