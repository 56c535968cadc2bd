"""examples/notebook.ipynb runs top to bottom in a real Jupyter kernel (nbclient + ipykernel) and shows
what a new user should see: graphs as SVG, run results as HTML tables. Offline model only: no network.

The kernel is this interpreter (a kernelspec written for the test, found through ``JUPYTER_PATH``) with
this checkout first on ``PYTHONPATH``, so it imports the fsmchat under test. A kernel that cannot start
fails the test with the reason; nothing is skipped."""
import json
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "examples" / "notebook.ipynb"
KERNEL = "fsmchat-notebook-test"


def outputs_of(cell):
    return [o for o in cell.get("outputs", []) if o.get("output_type") in ("execute_result", "display_data")]


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    spec_dir = tmp_path_factory.mktemp("jupyter") / "kernels" / KERNEL
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "fsmchat under test", "language": "python",
        "env": {"PYTHONPATH": str(ROOT), "FSMCHAT_MODEL": "", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}}))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), \
        "examples/notebook.ipynb is committed with outputs; clear them (they are made by running it)"
    probe = nbformat.v4.new_code_cell("import fsmchat; print(fsmchat.__file__)")
    nb.cells.append(probe)  # which fsmchat the kernel imported (not saved to the file)
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(spec_dir.parent.parent))
    mp.delenv("FSMCHAT_MODEL", raising=False)
    client = NotebookClient(nb, timeout=180, kernel_name=KERNEL, resources={"metadata": {"path": str(ROOT)}})
    try:
        client.execute()
    except Exception as exc:  # a kernel that does not start, or a cell that raised: fail, saying which
        pytest.fail(f"examples/notebook.ipynb did not run in a Jupyter kernel: {type(exc).__name__}: {exc}")
    finally:
        mp.undo()
    return nb


def test_the_kernel_imported_this_checkout(executed):
    printed = "".join(o.get("text", "") for o in executed.cells[-1].outputs if o.output_type == "stream")
    assert Path(printed.strip()).resolve() == ROOT / "fsmchat" / "__init__.py"


def test_no_cell_failed(executed):
    errors = [o for c in executed.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert errors == []


@pytest.mark.skipif(shutil.which("dot") is None, reason="needs Graphviz's dot for SVG (make test installs it)")
def test_patterns_and_graphs_display_as_svg(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    chat_cell, graph_cell = code[0], code[-2]  # `chat` and `flow.graph`
    for cell in (chat_cell, graph_cell):
        (out,) = outputs_of(cell)
        assert "<svg" in out["data"]["image/svg+xml"]
    assert out["data"]["text/plain"].startswith("StateGraph('flow', ")
    svg = outputs_of(chat_cell)[0]["data"]["image/svg+xml"]
    assert "seed" in svg and "penalize" in svg and "[has_winner]" in svg  # the group chat's states and guards
    assert outputs_of(chat_cell)[0]["data"]["text/plain"].startswith("GroupChat(name='dynamic-groupchat', "
                                                                     "speakers=['TechOptimist', 'TechCritic', 'Realist']")


def test_run_results_display_as_html_tables(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    for cell in (code[1], code[4]):  # `result` and `flow_result`
        (out,) = outputs_of(cell)
        page = out["data"]["text/html"]
        assert '<table class="fsmchat-transcript">' in page and "<th" in page
        assert "stop reason" in page and "model calls" in page and "tokens" in page and "cost" in page
        assert "<svg" in page or '<pre class="mermaid">' in page  # the graph with the run overlaid
        assert out["data"]["text/plain"].startswith("RunResult(stop_reason=")
    flow_page = outputs_of(code[4])[0]["data"]["text/html"]
    assert ">critic<" in flow_page and ">author<" in flow_page and ">summarizer<" in flow_page
    assert "done</td>" in flow_page  # the flow's stop reason


def test_print_is_short(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    text = "".join(o.get("text", "") for o in code[2].outputs if o.output_type == "stream")
    first, *rest = text.splitlines()
    assert first.startswith("RunResult(stop_reason=") and len(first) < 300
    assert rest[0].startswith("RunResult: stopped by ") and all(len(line) < 400 for line in rest)


def test_a_live_view_ends_holding_the_streamed_replies(executed):
    code = [c for c in executed.cells if c.cell_type == "code"]
    (cell,) = [c for c in code if "NotebookLive()" in c.source]
    (out,) = outputs_of(cell)  # one display, updated in place as the replies were written
    page = out["data"]["text/html"]
    assert "<b>Optimist</b>" in page and "<b>Critic</b>" in page and "<b>User</b>" in page
    assert "writing..." not in page  # every reply was posted whole at the end
