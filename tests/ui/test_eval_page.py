"""Evaluations in the run store and on the viewer's evaluation pages.

An eval of 3 cases x 2 variants x 2 repeats (scripted callable agents, no model) keeps its runs and
its record in a store: the record reads back the same from every store (memory, SQLite,
PostgreSQL) and from a new connection, a store written before evaluations were kept still opens,
and the viewer, read in Debian's headless Chromium (as tests/ui/test_ui_browser.py drives it),
shows the variants side by side with their differences from the baseline, links each case to its
run, diffs two transcripts, and shows a hostile output as text. Every expected value is written out.
"""
import shutil
import sqlite3

import httpx
import pytest

pytest.importorskip("pydantic_evals", reason="the evals extra is not installed (pip install -e '.[evals]')")

from pydantic_evals.evaluators import Contains  # noqa: E402

from fsmchat import RoundRobinSwarm  # noqa: E402
from fsmchat.evals import Check, Eval, load_dataset  # noqa: E402
from fsmchat.store.checkpoint import SqliteCheckpointer  # noqa: E402
from fsmchat.ui import Store  # noqa: E402
from fsmchat.ui.store import CheckpointView  # noqa: E402
from support.pg import pg_cluster, pg_dsn  # noqa: E402,F401 - fixtures
from support.stores import STORES, open_store, reopen  # noqa: E402,F401 - open_store is a fixture

HOSTILE = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2">'
WAIT = 90  # seconds a condition may take on a loaded machine (never a timing assertion)


def build(reply="Not yet."):
    def critic(turn):
        task = turn.transcript[0].content
        if task == "boom" and reply != "Not yet.":
            raise RuntimeError("the critic broke")
        return f"{reply} {HOSTILE}" if task == "xss" else reply

    return RoundRobinSwarm(agents=[critic], max_loops=1)


def tone(output, run):
    return (1.0, "it says yet") if "yet" in output else (0.5, "no yet in it")


def run_eval(store):
    dataset = load_dataset({"name": "triage", "cases": [{"name": "ship", "task": "Ship it?"},
                                                        {"name": "xss", "task": "xss"}, {"name": "boom", "task": "boom"}]})
    return Eval(dataset, build, variants={"terse": {}, "eager": {"reply": "Ship it now."}}, repeat=2,
                evaluators=[Contains(value="yet"), Check(tone, evaluation_name="tone")], checkpoint=store).run()


EXPECTED_CASES = [  # (case, variant, repeat, ok, error, output, Contains, tone, tone's reason)
    ("ship", "terse", 1, True, None, "Not yet.", True, 1.0, "it says yet"),
    ("ship", "terse", 2, True, None, "Not yet.", True, 1.0, "it says yet"),
    ("ship", "eager", 1, True, None, "Ship it now.", False, 0.5, "no yet in it"),
    ("ship", "eager", 2, True, None, "Ship it now.", False, 0.5, "no yet in it"),
    ("xss", "terse", 1, True, None, "Not yet. " + HOSTILE, True, 1.0, "it says yet"),
    ("xss", "terse", 2, True, None, "Not yet. " + HOSTILE, True, 1.0, "it says yet"),
    ("xss", "eager", 1, True, None, "Ship it now. " + HOSTILE, False, 0.5, "no yet in it"),
    ("xss", "eager", 2, True, None, "Ship it now. " + HOSTILE, False, 0.5, "no yet in it"),
    ("boom", "terse", 1, True, None, "Not yet.", True, 1.0, "it says yet"),
    ("boom", "terse", 2, True, None, "Not yet.", True, 1.0, "it says yet"),
    ("boom", "eager", 1, False, "EvalError: the run failed: RuntimeError: the critic broke", "boom", None, None, None),
    ("boom", "eager", 2, False, "EvalError: the run failed: RuntimeError: the critic broke", "boom", None, None, None),
]


def shape(cases):
    return [(c["case"], c["variant"], c["repeat"], c["ok"], c["error"], c["output"],
             c["assertions"].get("Contains", {}).get("value"), c["scores"].get("tone", {}).get("value"),
             c["scores"].get("tone", {}).get("reason")) for c in cases]


@pytest.mark.parametrize("store", STORES)
def test_an_evaluation_is_kept_in_the_store_and_read_back_with_each_case_linked_to_its_run(open_store, store):
    cp = open_store()
    result = run_eval(cp)
    again = reopen(cp)  # another connection (memory: the store itself)
    [info] = again.list_evals()
    assert (info.eval_id, info.name) == (result.eval_id, "triage")
    assert info.summary == {
        "variants": {"terse": {}, "eager": {"reply": "Ship it now."}}, "repeat": 2, "cases": 3, "runs": 12,
        "failed": 2, "calls": 0, "recorded": 0,
        "means": {"terse": {"Contains": {"mean": 1.0, "low": 1.0, "high": 1.0, "n": 6},
                            "tone": {"mean": 1.0, "low": 1.0, "high": 1.0, "n": 6}},
                  "eager": {"Contains": {"mean": 0.0, "low": 0.0, "high": 0.0, "n": 4},
                            "tone": {"mean": 0.5, "low": 0.5, "high": 0.5, "n": 4}}}}
    record = again.load_eval(result.eval_id)
    assert shape(record.cases) == EXPECTED_CASES
    ids = [c["run_id"] for c in record.cases]
    assert len(set(ids)) == 12 and all(i.startswith("eval-triage-") for i in ids)
    for case in record.cases:  # each case's run is in the same store, its last message the case's output
        saved = again.load(case["run_id"])
        assert saved.messages[-1].content == case["output"] or not case["ok"]
    assert [m.content for m in again.load(record.cases[-1]["run_id"]).messages] == ["boom"]  # the failed run, kept
    with pytest.raises(KeyError, match="no evaluation 'nope'"):
        again.load_eval("nope")
    with pytest.raises(ValueError, match=f"evaluation id '{result.eval_id}' is already kept"):
        again.put_eval(record)
    if store == "postgres":  # the viewer reads PostgreSQL through the store's own reading methods
        view = CheckpointView(again, "pg")
        assert [e.eval_id for e in view.evaluations()] == [result.eval_id]
        assert shape(view.evaluation(result.eval_id).cases) == EXPECTED_CASES


def test_a_store_written_before_evaluations_were_kept_opens_and_lists_none(tmp_path):
    path = tmp_path / "old.db"
    cp = SqliteCheckpointer(path)
    RoundRobinSwarm(agents=[lambda turn: "Hi."], max_loops=1).execute("Hello?", checkpoint=cp, run_id="r1")
    cp.close()
    with sqlite3.connect(path) as db:  # as an older fsmchat wrote it: no evals table
        db.execute("DROP TABLE evals")
    assert Store(path).evaluations() == []
    assert [s["run_id"] for s in Store(path).summaries()] == ["r1"]
    read_only = SqliteCheckpointer(path, read_only=True)
    assert read_only.list_evals() == []
    with pytest.raises(KeyError, match="no evaluation 'e1'"):
        read_only.load_eval("e1")
    read_only.close()
    result = run_eval(SqliteCheckpointer(path))  # opened for writing, it gains the table
    assert [e.name for e in Store(path).evaluations()] == ["triage"]
    assert shape(Store(path).evaluation(result.eval_id).cases) == EXPECTED_CASES


def test_eval_refuses_a_store_that_keeps_no_evaluations():
    from support.dict_store import DictStore

    with pytest.raises(TypeError, match=r"Eval\(checkpoint=DictStore\(...\)\) is invalid: a store that keeps "
                                        r"evaluations beside its runs"):
        run_eval(DictStore())


# ---- the viewer's pages ----
@pytest.fixture(scope="module")
def served(tmp_path_factory):
    pytest.importorskip("uvicorn", reason="the ui extra is not installed (pip install -e '.[ui]')")
    from fsmchat.ui.server import start

    db = tmp_path_factory.mktemp("evals") / "runs.db"
    result = run_eval(SqliteCheckpointer(db))
    running = start(db)
    yield running.url, result.eval_id, db
    running.stop()


def test_the_pages_hold_the_hostile_output_only_as_escaped_data_and_refuse_bad_addresses(served):
    url, eval_id, _ = served
    for path in (f"/evals/{eval_id}", f"/evals/{eval_id}/case?name=xss"):
        page = httpx.get(url + path).text
        assert "window.pwned" in page and "<script>window.pwned" not in page and "<img src=x" not in page
        assert "\\u003cscript\\u003ewindow.pwned=1\\u003c/script\\u003e\\u003cimg src=x" in page
    got = httpx.get(f"{url}/api/evals/{eval_id}/case", params={"name": "xss", "a": "terse", "b": "eager"}).json()
    assert [(r["op"], r["a"]["segments"], r["b"]["segments"]) for r in got["diff"]] == [
        ("equal", [["same", "xss"]], [["same", "xss"]]),
        ("replace", [["changed", "Not yet. "], ["same", HOSTILE]], [["changed", "Ship it now. "], ["same", HOSTILE]])]
    missing = httpx.get(url + "/evals/nope")
    assert missing.status_code == 404 and "no evaluation &#x27;nope&#x27; in " in missing.text
    bad = httpx.get(f"{url}/evals/{eval_id}", params={"baseline": "loud"})
    assert bad.status_code == 404 and "no variant &#x27;loud&#x27; (the baseline) in evaluation" in bad.text
    assert "its variants: terse, eager" in bad.text
    assert httpx.get(f"{url}/api/evals/{eval_id}/case", params={"name": "ship", "repeat": "x"}).json() == {
        "error": "?repeat='x' is invalid: a whole number from 1"}
    assert httpx.get(f"{url}/api/evals/{eval_id}/case", params={"name": "ship", "repeat": "3"}).json() == {
        "error": f"no repeat 3 of case 'ship' in evaluation '{eval_id}'; its repeats: 1, 2"}
    assert httpx.get(f"{url}/api/evals/{eval_id}/case", params={"name": "gone"}).json() == {
        "error": f"no case 'gone' in evaluation '{eval_id}'; its cases: ship, xss, boom"}
    assert httpx.get(f"{url}/api/evals/{eval_id}/case").status_code == 400


CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@pytest.fixture(scope="module")
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Chromium or chromium-driver is not installed, so the evaluation pages cannot be read in a browser "
                    "(`make chromium` installs them: apt-get install chromium chromium-driver)")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000",
                "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def until(browser, script):
    """Wait until ``script`` (a JS function body returning a truthy value) holds; return its value."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, WAIT).until(lambda b: b.execute_script(script))


ROWS = "return [...document.querySelectorAll('{} tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent));"


def test_the_evaluations_list_links_to_the_evaluation(browser, served):
    url, eval_id, _ = served
    browser.get(url + "/")
    until(browser, "return document.querySelector('#runs tbody tr')")
    browser.find_element("id", "evals-home").click()
    rows = until(browser, ROWS.format("#evals").replace("return ", "const r = ") + " return r.length ? r : null;")
    assert [row[:6] for row in rows] == [[f"triage{eval_id}", "terse, eager", "3", "12", "2", "0"]]
    assert rows[0][6] == "terse: Contains 1.00, tone 1.00eager: Contains 0.00, tone 0.50"
    browser.find_element("link text", "triage").click()
    assert until(browser, "return document.getElementById('eval-id')?.textContent") == eval_id


def test_the_evaluation_page_shows_the_variants_side_by_side_with_their_differences(browser, served):
    url, eval_id, _ = served
    browser.get(f"{url}/evals/{eval_id}")
    until(browser, "return document.querySelector('#eval-cases tbody tr')")
    assert browser.execute_script(ROWS.format("#eval-summary")) == [
        ["Contains", "1.00", "0.00−1.00"], ["tone", "1.00", "0.50−0.50"], ["failed runs", "0", "2"]]
    cases = browser.execute_script("""return [...document.querySelectorAll('#eval-cases tbody tr')].map((tr) =>
        [tr.dataset.case, ...[...tr.querySelectorAll('td[data-variant]')].map((td) =>
          [...td.querySelectorAll('.values li')].map((li) => li.textContent).join(' | ')),
         [...tr.querySelectorAll('td[data-variant="eager"] .run-link')].map((a) => a.textContent).join(' ')]);""")
    assert cases == [
        ["ship", "Contains 1.00 | tone 1.00", "Contains 0.00−1.00 | tone 0.50−0.50", "run 1 run 2"],
        ["xss", "Contains 1.00 | tone 1.00", "Contains 0.00−1.00 | tone 0.50−0.50", "run 1 run 2"],
        ["boom", "Contains 1.00 | tone 1.00", "", "run 1 ✗ run 2 ✗"]]
    hostile = browser.execute_script(
        "return document.querySelector('tr[data-case=xss] td[data-variant=terse] .output').textContent")
    assert hostile == "Not yet. " + HOSTILE
    assert browser.execute_script("return window.pwned === undefined && !document.querySelector('#app img')")
    failed = browser.execute_script("return document.querySelector('tr[data-case=boom] td[data-variant=eager] .error')"
                                    ".textContent")
    assert failed == "EvalError: the run failed: RuntimeError: the critic broke"
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "baseline")).select_by_value("eager")  # the other variant as the baseline
    until(browser, "return location.search === '?baseline=eager' && document.querySelector('#eval-summary tbody tr')")
    assert browser.execute_script(ROWS.format("#eval-summary")) == [
        ["Contains", "1.00+1.00", "0.00"], ["tone", "1.00+0.50", "0.50"], ["failed runs", "0", "2"]]


def test_each_case_links_to_its_run_page(browser, served):
    url, eval_id, db = served
    record = Store(db).evaluation(eval_id)
    want = next(c["run_id"] for c in record.cases if (c["case"], c["variant"], c["repeat"]) == ("ship", "eager", 2))
    browser.get(f"{url}/evals/{eval_id}")
    link = until(browser, "return document.querySelectorAll('tr[data-case=ship] td[data-variant=eager] a.run-link')[1]")
    assert link.text == "run 2"
    link.click()
    assert until(browser, "return document.getElementById('run-id')?.textContent") == want
    contents = browser.execute_script("return [...document.querySelectorAll('#transcript > li .content')]"
                                      ".map((c) => c.textContent)")
    assert contents == ["Ship it?", "Ship it now."]


def test_the_case_page_diffs_two_transcripts_and_shows_the_hostile_output_as_text(browser, served):
    url, eval_id, _ = served
    browser.get(f"{url}/evals/{eval_id}")
    until(browser, "return document.querySelector('tr[data-case=xss] a.diff-link')").click()
    until(browser, "return document.querySelector('#diff tbody tr')")
    assert browser.execute_script("return location.search") == "?name=xss&a=terse&b=eager"
    rows = browser.execute_script("""return [...document.querySelectorAll('#diff tbody tr')].map((tr) =>
        [tr.dataset.op, ...[...tr.children].map((td) => td.querySelector('.role').textContent + ': ' +
          [...td.querySelectorAll('.content span')].map((s) => s.className + '[' + s.textContent + ']').join(''))]);""")
    assert rows == [
        ["equal", "User: same[xss]", "User: same[xss]"],
        ["replace", f"critic: changed[Not yet. ]same[{HOSTILE}]", f"critic: changed[Ship it now. ]same[{HOSTILE}]"]]
    assert browser.execute_script("return window.pwned === undefined && !document.querySelector('#app img') && "
                                  "document.querySelectorAll('script').length === 3")  # settings, data, the viewer's
    runs = browser.execute_script(ROWS.format("#case-runs"))
    assert [r[:4] for r in runs] == [["terse", "1", "run 1", "ran"], ["terse", "2", "run 2", "ran"],
                                     ["eager", "1", "run 1", "ran"], ["eager", "2", "run 2", "ran"]]
    assert runs[2][4:] == ["Ship it now. " + HOSTILE, f"Contains failedOutput string 'Ship it now. {HOSTILE}' does not "
                                                      "contain expected string 'yet'tone 0.50no yet in it"]
    from selenium.webdriver.support.ui import Select

    Select(browser.find_element("id", "diff-b")).select_by_value("terse")  # a variant against itself: the same
    assert until(browser, "return document.getElementById('diff-same')?.textContent") == \
        "The two transcripts are the same."


def test_a_failed_case_links_its_kept_run_and_diffs_it(browser, served):
    url, eval_id, _ = served
    browser.get(f"{url}/evals/{eval_id}/case?name=boom&b=eager&repeat=2")
    until(browser, "return document.querySelector('#diff tbody tr')")
    runs = browser.execute_script(ROWS.format("#case-runs"))
    assert [r[:4] for r in runs][2:] == [
        ["eager", "1", "run 1 ✗", "failedEvalError: the run failed: RuntimeError: the critic broke"],
        ["eager", "2", "run 2 ✗", "failedEvalError: the run failed: RuntimeError: the critic broke"]]
    rows = browser.execute_script("""return [...document.querySelectorAll('#diff tbody tr')].map((tr) =>
        [tr.dataset.op, ...[...tr.children].map((td) => td.textContent)]);""")
    assert rows == [["equal", "Userboom", "Userboom"], ["delete", "criticNot yet.", ""]]


def test_a_hand_written_record_shows_labels_a_missing_cell_and_why_a_transcript_is_missing():
    from fsmchat.store.checkpoint import EvalRecord
    from fsmchat.ui import EvalNotFound
    from fsmchat.ui.evalview import case_view, eval_view

    def case(name, variant, run_id, ok, mood, score):
        return {"case": name, "variant": variant, "repeat": 1, "run_id": run_id, "task": "Hi?", "output": mood,
                "ok": ok, "error": None if ok else "EvalError: no recording", "labels": {"mood": {"value": mood}},
                "scores": {"polite": {"value": score, "reason": "r"}}, "assertions": {}}

    record = EvalRecord("hand-1", "hand", 0.0, {"variants": {"a": {}, "b": {}}, "means": {
        "a": {"polite": {"mean": 0.25, "low": 0.25, "high": 0.25, "n": 1}},
        "b": {"polite": {"mean": 1.0, "low": 1.0, "high": 1.0, "n": 1}}}},
        [case("one", "a", "gone-run", True, "calm", 0.25), case("one", "b", None, False, "cross", 1.0),
         case("two", "a", "gone-run", True, "calm", 0.5)])
    view = eval_view(record, "b")
    assert [(r["case"], {v: (c["values"], c["labels"], c["deltas"]) for v, c in r["cells"].items()})
            for r in view["cases"]] == [
        ("one", {"a": ({"mood": None, "polite": 0.25}, {"mood": ["calm"]}, {"mood": None, "polite": -0.75}),
                 "b": ({"mood": None, "polite": 1.0}, {"mood": ["cross"]}, {})}),
        ("two", {"a": ({"mood": None, "polite": 0.5}, {"mood": ["calm"]}, {"mood": None, "polite": None}),
                 "b": ({"mood": None, "polite": None}, {}, {})})]
    assert [(r["evaluator"], r["cells"]["a"], r["cells"]["b"]) for r in view["summary"]] == [
        ("polite", {"mean": 0.25, "low": 0.25, "high": 0.25, "n": 1, "delta": -0.75},
         {"mean": 1.0, "low": 1.0, "high": 1.0, "n": 1, "delta": None}),
        ("mood", None, None)]
    assert view["failed"] == {"a": 0, "b": 1}
    shown = case_view(record, "one", None, None, None, missing_run)
    assert (shown["a"]["note"], shown["b"]["note"], shown["diff"]) == (
        "run gone-run is not in this store (a run re-scored from a cassette is kept in the store that recorded it)",
        "variant b's run of this case is not kept in the store (it failed before it ran: EvalError: no recording)", [])
    with pytest.raises(EvalNotFound, match="no variant 'c' \\(variant B\\) in evaluation 'hand-1'; its variants: a, b"):
        case_view(record, "one", "a", "c", None, missing_run)


def missing_run(run_id):
    from fsmchat.ui import RunNotFound

    raise RunNotFound(f"no run {run_id!r}")
