"""The ``no_keys`` fixture: no provider key in the environment, and an interceptor that records (and refuses) any request sent."""
import pytest

from fsmchat.speakers import llm


class Recorder:
    """An interceptor that records a request instead of sending it (none should arrive)."""

    def __init__(self):
        self.sent = []

    async def __call__(self, acompletion, agent, model, messages, meta, params):
        self.sent.append((agent, model))
        raise AssertionError("a request was sent")


@pytest.fixture
def no_keys(monkeypatch):
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "FSMCHAT_MODEL", "FSMCHAT_CHECK_KEYS"):
        monkeypatch.delenv(var, raising=False)
    rec = Recorder()
    token = llm.INTERCEPTOR.set(rec)
    yield rec
    llm.INTERCEPTOR.reset(token)
