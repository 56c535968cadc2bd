"""The run viewer's browser tests' headless Chromium (Selenium, the driver's path given): the module-scoped ``browser`` fixture and waits on page conditions; importing it skips without Chromium, selenium or uvicorn."""
import shutil

import pytest

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
if not (CHROMIUM and CHROMEDRIVER):
    pytest.skip("Chromium or chromium-driver is not installed, so the run viewer's browser tests cannot run "
                "(`make chromium` installs them: apt-get install chromium chromium-driver)", allow_module_level=True)
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
pytest.importorskip("uvicorn", reason="the ui extra is not installed (pip install -e '.[ui]')")

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

WIDTH = 1400  # the browser window's width (the runs table must fit it)
WAIT = 90  # seconds a condition may take on a loaded machine (never a timing assertion)


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={WIDTH},1000",
                "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    yield driver
    driver.quit()


def js(browser, script, *args):
    return browser.execute_script(script, *args)


def until(browser, script, *args):
    """Wait until ``script`` (a JS expression's body returning a truthy value) holds; return its value."""
    return WebDriverWait(browser, WAIT).until(lambda b: b.execute_script(script, *args))


def current(browser):
    """(highlighted state, highlighted edge, visible transcript contents) on a run page."""
    return js(browser, """
        const t = (sel) => { const e = document.querySelector(sel); return e ? e.textContent : null; };
        return [t('#graph .node.current title'), t('#graph .edge.current title'),
                [...document.querySelectorAll('#transcript > li')].filter((li) => !li.hidden)
                  .map((li) => li.querySelector('.content').textContent)];""")
