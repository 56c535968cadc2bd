"""Configs and checkpoints import only trusted code: fsmchat's own modules, the caller's ``allow=``
prefixes, or anything with ``trusted=True``. Each refusal is an ``UntrustedReference`` naming the
reference, raised before the code it names is imported, called or a checkpoint is written."""
import json
import sqlite3
import sys

import pytest

import fsmchat
from fsmchat import Agent, GroupChat, SqliteCheckpointer, from_config
from fsmchat.errors import ConfigError, ConfigTypeError
from fsmchat.trust import Trust, UntrustedReference


def speak(turn):
    return "trusted words"


def build():
    """The checkpointed pattern's factory."""
    chat = GroupChat(agents=[Agent("a", system_prompt="You like cats."), Agent("b", system_prompt="You like dogs.")],
                     max_loops=4)
    chat.factory = "test_trust:build"
    return chat


@pytest.fixture
def evil(tmp_path, monkeypatch):
    """A module and a file that leave a marker when imported or executed (so a test sees whether
    they ran), and a module that re-exports os and subprocess functions."""
    marker = tmp_path / "ran"
    code = f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\ndef x():\n    return None\n"
    (tmp_path / "evil_mod.py").write_text(code)
    (tmp_path / "evil.py").write_text(code)
    (tmp_path / "reexports.py").write_text("import os\nfrom subprocess import getoutput\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("evil_mod", "reexports"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return marker


def chat_config(**agent_b):
    """A GroupChat config whose second participant is replaced by ``agent_b``."""
    data = GroupChat(agents=[Agent("a"), Agent("b")]).to_config().model_dump()
    data["agents"][1] = agent_b
    return data


REFUSED = [  # (what the config names, config, the refusal's text)
    ("os:system as a participant", chat_config(kind="callable", ref="os:system"),
     "participant: refused 'os:system': module 'os' is not allowed (allowed: ['fsmchat']); pass allow=['os']"),
    ("subprocess:getoutput as a participant", chat_config(kind="callable", ref="subprocess:getoutput"),
     "refused 'subprocess:getoutput': module 'subprocess' is not allowed"),
    ("os:getpid as a factory (called at load before)", {"kind": "factory", "factory": "os:getpid"},
     "factory: refused 'os:getpid': module 'os' is not allowed"),
    ("an fsmchat function as a factory", {"kind": "factory", "factory": "fsmchat.patterns.distributed:shutdown"},
     "factory: refused 'fsmchat.patterns.distributed:shutdown': a factory is called while loading, so it must come from a "
     "module you allow"),
    ("a file path as a factory", {"kind": "factory", "factory": "evil.py:x"},
     "factory: refused 'evil.py:x': it is a file path; files are loaded only with trusted=True"),
    ("a file path with a folder", {"kind": "factory", "factory": "/tmp/x/build:make"},
     "refused '/tmp/x/build:make': it is a file path"),
    ("subprocess.Popen as agent_class", chat_config(kind="agent", name="b", agent_class="subprocess:Popen"),
     "agent_class: refused 'subprocess:Popen': module 'subprocess' is not allowed"),
    ("a non-Agent fsmchat class as agent_class",
     chat_config(kind="agent", name="b", agent_class="fsmchat.network.hub:Hub"),
     "agent 'b' agent_class: refused 'fsmchat.network.hub:Hub': it is not a subclass of fsmchat.speakers.agent.Agent",
     ["fsmchat"]),
    ("a class as a participant", chat_config(kind="callable", ref="fsmchat.speakers.agent:Agent"),
     "participant: refused 'fsmchat.speakers.agent:Agent': it is a class, not a function", ["fsmchat"]),
    ("a dunder attribute", chat_config(kind="callable", ref="fsmchat.config:callable_ref.__globals__"),
     "attribute 'callable_ref.__globals__' is not a plain public name"),
    ("an os function re-exported by an fsmchat module", chat_config(kind="callable", ref="fsmchat.cli.run:os.system"),
     "refused 'fsmchat.cli.run:os.system': it is defined in 'posix', which is not allowed", ["fsmchat.cli.run"]),
    ("a module as a participant", chat_config(kind="callable", ref="fsmchat.cli.run:os"),
     "refused 'fsmchat.cli.run:os': it is module 'os', which is not allowed", ["fsmchat.cli.run"]),
    ("an os function re-exported by an fsmchat module, by default",
     chat_config(kind="callable", ref="fsmchat.cli.run:os.system"),
     "refused 'fsmchat.cli.run:os.system': it is fsmchat's own code, not one of the callables a config may name"),
    ("a pattern_class that is not a GroupChat",
     {**GroupChat(agents=[Agent("a"), Agent("b")]).to_config().model_dump(),
      "pattern_class": "fsmchat.flow.flow:AgentFlow"},
     "pattern_class: refused 'fsmchat.flow.flow:AgentFlow': it is not a subclass of "
     "fsmchat.patterns.group_chat.GroupChat", ["fsmchat"]),
    ("a module outside the allowed prefix", chat_config(kind="callable", ref="evil_mod:x"),
     "module 'evil_mod' is not allowed"),
    ("a scripted model's function", {**GroupChat(agents=[Agent("a"), Agent("b")]).to_config().model_dump(),
                                     "models": [{"kind": "function", "id": "m1", "fn": "evil_mod:x"}]},
     "scripted model 'm1' fn: refused 'evil_mod:x'"),
    ("a scripted item", {**GroupChat(agents=[Agent("a"), Agent("b")]).to_config().model_dump(),
                         "models": [{"kind": "scripted", "id": "m2",
                                     "scripts": {"a": [{"kind": "delay", "seconds": 0,
                                                        "then": {"kind": "callable", "ref": "os:system"}}]}}]},
     "scripted model 'm2' script of 'a': refused 'os:system'"),
]


@pytest.mark.parametrize("cfg,message,allow", [(*c[1:3], c[3] if len(c) > 3 else ()) for c in REFUSED],
                         ids=[c[0] for c in REFUSED])
def test_untrusted_references_are_refused_before_anything_runs(cfg, message, allow, evil):
    with pytest.raises(UntrustedReference) as err:
        from_config(cfg, allow=allow)
    assert message in str(err.value)
    assert err.value.ref in str(err.value)
    assert not evil.exists() and "evil_mod" not in sys.modules  # nothing was imported or executed
    assert isinstance(err.value, fsmchat.FsmchatError) and isinstance(err.value, PermissionError)


def test_one_refused_reference_refuses_the_whole_config_first(evil):
    """A good reference before a bad one is not loaded either: the check runs over the whole config."""
    cfg = chat_config(kind="callable", ref="evil_mod:x")
    cfg["agents"][0] = {"kind": "callable", "ref": "test_trust:speak"}
    cfg["models"] = [{"kind": "function", "id": "never-registered", "fn": "test_trust:speak"}]
    from fsmchat.testing.models import _Provider

    with pytest.raises(UntrustedReference, match="evil_mod:x"):
        from_config(cfg, allow=["test_trust"])
    assert "never-registered" not in _Provider._instances and not evil.exists()


def test_allow_adds_module_prefixes_and_trusted_adds_files(evil, tmp_path):
    cfg = chat_config(kind="callable", ref="evil_mod:x")
    chat = from_config(cfg, allow=["evil_mod"])
    assert evil.exists() and chat.agents[1].fn.__module__ == "evil_mod"
    evil.unlink()
    with pytest.raises(UntrustedReference, match="it is a file path"):
        from_config({"kind": "factory", "factory": f"{tmp_path}/evil.py:x"}, allow=["evil"])
    assert not evil.exists()
    with pytest.raises(TypeError, match=r"factory: factory '.*evil.py:x' returned a NoneType, not a pattern"):
        from_config({"kind": "factory", "factory": f"{tmp_path}/evil.py:x"}, trusted=True)
    assert evil.exists()  # trusted: the caller said so
    # a re-export is judged by where the function lives, even when its module is allowed
    with pytest.raises(UntrustedReference, match="defined in 'subprocess'"):
        from_config(chat_config(kind="callable", ref="reexports:getoutput"), allow=["reexports"])


def test_allow_is_a_dotted_prefix_not_a_substring():
    trust = Trust.of(["myproject.agents"])
    assert trust.check("myproject.agents:f", "x") == ("myproject.agents", "f")
    assert trust.check("myproject.agents.sub.deep:g", "x") == ("myproject.agents.sub.deep", "g")
    for ref in ("myproject.agentsevil:f", "myproject:f", "myproject.agent:f", "os:system"):
        with pytest.raises(UntrustedReference, match="is not allowed"):
            trust.check(ref, "x")
    assert Trust.of("myproject").allows("myproject.agents")  # a single prefix as a string


def test_allow_and_trusted_are_checked():
    with pytest.raises(ConfigError, match=r"from_config: allow=\['\.\./x'\] is invalid: '\.\./x' is not a dotted"):
        from_config({"kind": "factory", "factory": "fsmchat:x"}, allow=["../x"])
    with pytest.raises(ConfigTypeError, match="from_config: trusted='yes' is invalid: True or False"):
        from_config({"kind": "factory", "factory": "fsmchat:x"}, trusted="yes")
    with pytest.raises(ConfigTypeError, match="resume: allow=5 is invalid"):
        fsmchat.resume("r", SqliteCheckpointer(":memory:"), allow=5)


def test_module_functions_travel_with_allow():
    chat = GroupChat(agents=[Agent("a"), speak], max_loops=3)
    with pytest.raises(UntrustedReference, match="test_trust:speak"):
        from_config(chat.to_config())
    rebuilt = from_config(chat.to_config(), allow=["test_trust"])
    assert rebuilt.agents[1].fn is speak and rebuilt.run("t") == chat.run("t")


def _dump(path):
    con = sqlite3.connect(path)
    try:
        return list(con.iterdump())
    finally:
        con.close()


@pytest.mark.parametrize("tampered", ["os:system", "subprocess:getoutput", "evil_mod:x", "{dir}/evil.py:x",
                                      "fsmchat.cli.run:os.system"])
def test_a_tampered_checkpoint_factory_is_refused_and_nothing_is_written(tmp_path, evil, tampered):
    db = str(tmp_path / "runs.db")
    cp = SqliteCheckpointer(db)
    full = build().execute("pets?", checkpoint=cp, run_id="r1")
    cp.close()
    con = sqlite3.connect(db)
    meta = json.loads(con.execute("SELECT meta FROM runs WHERE run_id='r1'").fetchone()[0])
    assert meta["factory"] == "test_trust:build"
    meta["factory"] = tampered.format(dir=tmp_path)
    con.execute("UPDATE runs SET meta=? WHERE run_id='r1'", (json.dumps(meta),))
    con.commit()
    con.close()
    before = _dump(db)
    cp = SqliteCheckpointer(db)
    with pytest.raises(UntrustedReference, match=r"run 'r1' factory: refused '.*'"):
        fsmchat.resume("r1", cp, allow=["test_trust"])
    cp.close()
    assert _dump(db) == before and not evil.exists() and "evil_mod" not in sys.modules
    # the untampered factory resumes (rebuilds the finished run) under the same trust
    con = sqlite3.connect(db)
    meta["factory"] = "test_trust:build"
    con.execute("UPDATE runs SET meta=? WHERE run_id='r1'", (json.dumps(meta),))
    con.commit()
    con.close()
    cp = SqliteCheckpointer(db)
    with pytest.raises(UntrustedReference, match="module 'test_trust' is not allowed"):
        fsmchat.resume("r1", cp)
    assert fsmchat.resume("r1", cp, allow=["test_trust"]).transcript == full.transcript
    cp.close()


# fsmchat's own code is trusted to import, not to run: a default from_config may name only the callables
# of the allow-list (the README's Security table), never the CLI, a file loader, a report writer, a store...
INTERNALS = ["fsmchat.cli.commands:main", "fsmchat.targets:load_file", "fsmchat.ui.report:write_report",
             "fsmchat.store.checkpoint:SqliteCheckpointer", "fsmchat.cli.gallery:write", "fsmchat.patterns.distributed:run_id_for",
             "fsmchat.store.timetravel:fork"]
ALLOWED_NOW = "and of its code only ['fsmchat.flow.context:flow_input', 'fsmchat:flow_input']"


@pytest.mark.parametrize("ref", INTERNALS)
def test_fsmchat_internals_are_refused_as_participants_naming_what_is_allowed(ref):
    cfg = {"kind": "round_robin", "agents": [{"kind": "callable", "ref": ref}]}
    with pytest.raises(UntrustedReference) as err:
        from_config(cfg)
    module = ref.partition(":")[0]
    assert str(err.value) == (
        f"participant: refused {ref!r}: it is fsmchat's own code, not one of the callables a config may name; a "
        "config may use fsmchat's kinds (participants 'agent', 'callable', 'human'; patterns; flow steps) "
        f"{ALLOWED_NOW}; pass allow=[{module!r}] if you mean to run it, or trusted=True")
    assert err.value.ref == ref


@pytest.mark.parametrize("ref", INTERNALS)
def test_fsmchat_internals_are_refused_where_any_function_is_named(ref):
    """The same rule for a flow's Task handler, a Discussion's until, a flow step and a scripted model."""
    configs = [
        {"kind": "flow", "steps": [{"kind": "task", "name": "t", "handler": ref}]},
        {"kind": "flow", "steps": [{"kind": "discussion", "agents": [{"kind": "callable", "ref": "fsmchat:flow_input"}],
                                    "until": ref}]},
        {"kind": "flow", "steps": [{"kind": "callable", "ref": ref}]},
        {**GroupChat(agents=[Agent("a"), Agent("b")]).to_config().model_dump(),
         "models": [{"kind": "function", "id": "m9", "fn": ref}]},
    ]
    for cfg in configs:
        with pytest.raises(UntrustedReference, match=f"refused '{ref}': it is fsmchat's own code"):
            from_config(cfg)


def test_the_allowed_callables_load_by_default_and_allow_opens_an_internal_module():
    from fsmchat import AgentFlow, Task, flow_input

    flow = AgentFlow(steps=[Task(handler=flow_input, post=False, save_as="topic")])
    assert from_config(flow.to_config()).steps[0].handler is flow_input
    public = {"kind": "round_robin", "agents": [{"kind": "callable", "ref": "fsmchat:flow_input"}]}
    assert from_config(public).agents[0].fn is flow_input
    from fsmchat.cli import main
    cfg = {"kind": "round_robin", "agents": [{"kind": "callable", "ref": "fsmchat.cli.commands:main"}]}
    assert from_config(cfg, allow=["fsmchat.cli.commands"]).agents[0].fn is main  # the caller said so
    assert from_config(cfg, trusted=True).agents[0].fn is main


def test_fsmchat_code_re_exported_by_an_allowed_module_is_still_refused(tmp_path, monkeypatch):
    (tmp_path / "mine.py").write_text("from fsmchat.targets import load_file\nfrom fsmchat import flow_input\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "mine", raising=False)
    cfg = {"kind": "round_robin", "agents": [{"kind": "callable", "ref": "mine:load_file"}]}
    with pytest.raises(UntrustedReference, match="refused 'mine:load_file': it is fsmchat's own code"):
        from_config(cfg, allow=["mine"])
    ok = {"kind": "round_robin", "agents": [{"kind": "callable", "ref": "mine:flow_input"}]}
    assert from_config(ok, allow=["mine"]).agents[0].fn.__name__ == "flow_input"


def test_the_readme_security_table_is_the_allow_list():
    from pathlib import Path

    from fsmchat.trust import ALLOWED_REFERENCES

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme.split("### What a config may name in fsmchat", 1)[1].split("\n#", 1)[0]
    rows = [line.split("|")[1].strip().strip("`") for line in section.splitlines()
            if line.startswith("| `")]
    assert rows == ["fsmchat.flow.context:flow_input", "fsmchat:flow_input"]
    assert rows == list(ALLOWED_REFERENCES)
