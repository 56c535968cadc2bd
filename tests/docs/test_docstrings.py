"""The public API's docstrings: one style (Google), each name with an example, every example run.

The public API is every name in ``fsmchat.__all__`` and its sub-packages' ``__all__``, plus every
name the API reference pages (docs/reference/*.md, tests/docs/test_site.py) list by hand."""
import doctest
import importlib
import inspect
import logging
import os
import re
from pathlib import Path

import griffe
import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ["fsmchat", "fsmchat.graph", "fsmchat.speakers", "fsmchat.flow", "fsmchat.ui", "fsmchat.patterns",
            "fsmchat.network"]
CONSTANTS = {"RESPOND_TOOL": "fsmchat.speakers.respond.RESPOND_TOOL"}  # values carry no __module__


def public_api() -> dict[str, list[str]]:
    """Defining path (``fsmchat.engine.GraphRun``) -> the public names it is exported as."""
    out: dict[str, list[str]] = {}
    for pkg in PACKAGES:
        mod = importlib.import_module(pkg)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                path = f"{obj.__module__}.{obj.__qualname__}"
            elif name in CONSTANTS:
                path = CONSTANTS[name]
            else:  # a constant of the sub-package it is exported from
                home = f"fsmchat.{mod._EXPORTS[name]}" if pkg == "fsmchat" else pkg
                path = f"{home}.{name}"
            out.setdefault(path, []).append(f"{pkg}.{name}")
    for page in sorted((ROOT / "docs" / "reference").glob("*.md")):  # ``::: module`` with ``members: [...]``
        for module, listed in re.findall(r"^::: (\S+)\n(?:    .*\n)*?\s+members: \[([^]]*)\]", page.read_text(), re.M):
            for name in re.split(r"[\s,]+", listed.strip()):
                obj = getattr(importlib.import_module(module), name)
                path = f"{obj.__module__}.{obj.__qualname__}" if inspect.isclass(obj) or inspect.isfunction(obj) \
                    else f"{module}.{name}"
                if path not in out:
                    out[path] = [f"docs/reference/{page.name}"]
    return out


API = public_api()
MODULES = sorted({path.rsplit(".", 1)[0] for path in API})


@pytest.fixture(scope="module")
def package():
    return griffe.load("fsmchat", search_paths=[str(ROOT)], docstring_parser="google")


def test_the_scope_is_the_exported_api_and_the_reference_pages():
    assert len(API) >= 177, sorted(API)  # a new public name joins the checks below
    assert API["fsmchat.flow.steps.if_"] == ["fsmchat.if_", "fsmchat.when", "fsmchat.flow.if_", "fsmchat.flow.when"]
    assert API["fsmchat.patterns.base.Pattern"] == ["fsmchat.Pattern", "fsmchat.patterns.Pattern"]
    assert API["fsmchat.network.EV_TEXT"] == ["fsmchat.EV_TEXT", "fsmchat.network.EV_TEXT"]  # a constant: its package
    assert API["fsmchat.config.convert.to_config"] == ["docs/reference/config.md"]  # listed by a page, not exported
    assert API["fsmchat.testing.replay.cassette"] == ["docs/reference/testing.md"]


def sections(obj, caplog) -> dict[str, list]:
    with caplog.at_level(logging.WARNING, logger="griffe"):
        caplog.clear()
        parsed = obj.docstring.parse("google", warn_unknown_params=True, warn_missing_types=False)
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [], f"{obj.path}: {warnings}"
    out: dict[str, list] = {}
    for s in parsed:
        out.setdefault(s.kind.value, []).append(s)
    return out


def documented(secs: dict[str, list], kind: str) -> set[str]:
    return {item.name.lstrip("*") for s in secs.get(kind, []) for item in s.value}


@pytest.mark.parametrize("path", sorted(API))
def test_each_public_name_has_a_google_docstring_with_an_example(path, package, caplog):
    obj = package[path.removeprefix("fsmchat.")]
    obj = obj.final_target if obj.is_alias else obj
    assert obj.docstring is not None, f"{path} has no docstring"
    summary = obj.docstring.value.splitlines()[0]
    assert summary.endswith(".") and summary[:1].isupper(), f"{path}: the first line is one sentence: {summary!r}"
    secs = sections(obj, caplog)
    assert "examples" in secs, f"{path}: no Examples section"
    if obj.is_function:
        params = {p.name for p in obj.parameters if p.name not in ("self", "cls")}
        assert documented(secs, "parameters") == params, f"{path}: Args must name exactly {sorted(params)}"
    if obj.is_class:
        init = obj.members.get("__init__")
        if "dataclass" not in obj.labels and init is not None and not init.is_alias and init.parent is obj:
            params = {p.name for p in init.parameters if p.name not in ("self", "cls")}
            init_secs = sections(init, caplog) if init.docstring else {}
            named = documented(secs, "parameters") | documented(init_secs, "parameters")
            assert named == params, f"{path}: Args must name exactly {sorted(params)}"
        elif "dataclass" in obj.labels or any("BaseModel" in str(b) for b in obj.bases):
            fields = {n for n, m in obj.members.items() if m.is_attribute and not n.startswith("_")
                      and n != "model_config" and m.annotation is not None and "property" not in m.labels
                      and not str(m.annotation).startswith("ClassVar")}
            assert fields <= documented(secs, "attributes"), \
                f"{path}: Attributes must name {sorted(fields - documented(secs, 'attributes'))}"
        for name, member in obj.members.items():
            if name.startswith("_") or member.is_alias or member.is_attribute and "property" not in member.labels:
                continue
            assert member.docstring is not None, f"{path}.{name} has no docstring"
            sections(member, caplog)


def constant_examples(package) -> list[tuple[str, doctest.DocTest]]:
    """(module, the examples of an exported constant's docstring): doctest cannot see those, since
    an attribute's docstring is not kept at run time (griffe reads it from the source)."""
    parser, out = doctest.DocTestParser(), []
    for path in sorted(API):
        obj = package[path.removeprefix("fsmchat.")]
        obj = obj.final_target if obj.is_alias else obj
        if obj.is_attribute and obj.docstring is not None:
            test = parser.get_doctest(obj.docstring.value, {}, path, str(obj.filepath), obj.docstring.lineno)
            out.append((path.rsplit(".", 1)[0], test))
    return out


def test_every_example_runs(tmp_path, monkeypatch, package):
    """The >>> examples of every module of the public API, as doctests, offline (the exported
    constants' own examples included)."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.endswith("_API_KEY") or k == "FSMCHAT_MODEL"]:
        monkeypatch.delenv(key)
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    results = {}
    for name in MODULES:
        module = importlib.import_module(name)
        failed, tried = doctest.testmod(module, optionflags=flags, report=True, verbose=False)
        results[name] = (failed, tried)
    runner = doctest.DocTestRunner(optionflags=flags, verbose=False)
    constants = constant_examples(package)
    for name, test in constants:
        outcome = runner.run(test)
        failed, tried = results[name]
        results[name] = (failed + outcome.failed, tried + outcome.attempted)
    assert len(constants) >= 18 and "fsmchat.speakers.respond" in {name for name, _ in constants}
    assert {k: v for k, v in results.items() if v[0]} == {}
    assert all(tried for _, tried in results.values()), {k: v for k, v in results.items() if not v[1]}
