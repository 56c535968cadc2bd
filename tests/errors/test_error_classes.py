"""Every exception fsmchat defines derives from ``FsmchatError`` (``except FsmchatError`` catches
them all) and keeps the builtin base a user may already catch."""
import importlib
import inspect
import pkgutil

import pytest

import fsmchat
from fsmchat.errors import FsmchatError

SKIP = {"fsmchat.testing.plugin"}


def exception_classes():
    out = {}
    for info in pkgutil.walk_packages(fsmchat.__path__, "fsmchat."):
        if info.name in SKIP:
            continue
        mod = importlib.import_module(info.name)
        for name, obj in vars(mod).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name:
                out[f"{info.name}.{name}"] = obj
    return out


def test_every_fsmchat_exception_is_an_fsmchat_error():
    """Private ones too: an internal signal that escaped (``_MaxSteps``) is still caught by ``except FsmchatError``."""
    classes = exception_classes()
    assert len(classes) >= 38 and "fsmchat.engine._MaxSteps" in classes
    assert sorted(n for n, c in classes.items() if not issubclass(c, FsmchatError)) == []


@pytest.mark.parametrize("name, builtin", [("fsmchat.flow.compile.StepError", RuntimeError),
                                           ("fsmchat.cli.gallery.GalleryConfigError", ValueError),
                                           ("fsmchat.store.protocol.NotSerializable", TypeError),
                                           ("fsmchat.testing.models.ScriptExhausted", AssertionError),
                                           ("fsmchat.errors.ConfigError", ValueError),
                                           ("fsmchat.errors.ConfigTypeError", TypeError),
                                           ("fsmchat.trust.UntrustedReference", PermissionError),
                                           ("fsmchat.errors.DeadlineExceeded", TimeoutError)])
def test_the_builtin_bases_stay(name, builtin):
    assert issubclass(exception_classes()[name], builtin)
