"""Where a model name leads, and litellm made ready to take it: the model string of a user's
model name (``resolve_model``: ``offline`` is fsmchat's own provider), fsmchat's own in-process
providers (``register_own``: the offline and scripted models, answered without litellm) and the
litellm custom providers registered through fsmchat (``register_provider``), litellm itself,
imported on first use (``get_litellm``; ``load_litellm`` in a worker thread, before a run's clock
starts) and kept out of later garbage collections, and the checks a run makes before its first
request: that every agent's model names a provider (``unknown_models``) and has its credentials
(``missing_credentials``). ``fsmchat.speakers.llm`` sends the requests.

litellm's per-call work that fsmchat does not use is switched off when litellm is first imported
(``lean``): the base64 scan and copy of every request for its logging payload, and pricing each
response twice (fsmchat reads the cost litellm computed during the call; fsmchat's own providers
say they are free, so litellm does not search its cost map for them). A user's litellm callbacks
still fire with the same payloads, except that a long base64 image in a logged request is no longer
shortened (set ``MAX_BASE64_LENGTH_FOR_LOGGING`` to keep litellm's default of 64 characters)."""
from __future__ import annotations

import asyncio
import difflib
import gc
import os
import threading
from typing import Any, AsyncIterator, Iterable, Protocol

from ..errors import ConfigError, MissingCredentials
from . import log_secrets, wire
from .chunks import litellm_chunks

OFFLINE_PROVIDER = "fsmchat-offline"

# Set before anything imports litellm: its import otherwise fetches a price list over the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
GC_FREEZE_ENV = "FSMCHAT_GC_FREEZE"  # "0": litellm's import stays in every garbage collection
BASE64_LOG_ENV = "MAX_BASE64_LENGTH_FOR_LOGGING"  # a user's own setting of it wins over ``lean``
_lock = threading.RLock()  # re-entered: the import (under it) makes the offline provider (own_handler)
_litellm: Any = None
_loading = threading.Event()  # set while litellm's first import runs
_providers: dict[str, object] = {}  # litellm custom providers, by name


def default_model() -> str:
    """``FSMCHAT_MODEL`` if set, else the built-in offline model."""
    return os.environ.get("FSMCHAT_MODEL") or "offline"


def resolve_model(model: str | None) -> str:
    """The litellm model string for a user's model name (``offline`` -> fsmchat's provider)."""
    m = model or default_model()
    if m == "offline" or m.startswith("offline/"):
        return f"{OFFLINE_PROVIDER}/{m.partition('/')[2] or 'default'}"
    return m


class OwnProvider(Protocol):
    """One of fsmchat's own providers (the offline model, the scripted models), answered in process."""

    async def acompletion(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                          meta: dict[str, object]) -> object:
        """The whole reply to a request (a ``wire.WireResponse``)."""

    def astream(self, model: str, messages: list[dict[str, object]], params: dict[str, object],
                meta: dict[str, object]) -> AsyncIterator[dict[str, object]]:
        """The reply as the chunks an OpenAI-compatible server streams."""


_own: dict[str, OwnProvider] = {}  # fsmchat's own providers, answered in this process (never through litellm)


def register_own(name: str, handler: OwnProvider) -> None:
    """Add one of fsmchat's own providers (the offline model, the scripted models): requests to
    ``name/<model>`` are answered in this process by ``handler.acompletion(model, messages, params,
    meta)`` (a ``wire.WireResponse``) and, streamed, ``handler.astream(...)`` (OpenAI chunk dicts),
    through the same retries, limits, streaming and usage as every call; litellm is not imported."""
    with _lock:
        _own[name] = handler
        if _litellm is not None and name not in _providers:
            _providers[name] = litellm_adapter(_litellm, handler)
            _install(_litellm, name, _providers[name])


def own_handler(resolved: str) -> OwnProvider | None:
    """The in-process provider of ``resolved`` (``provider/model``), or None; the offline model
    is made on first use."""
    provider = resolved.split("/", 1)[0]
    handler = _own.get(provider)
    if handler is None and provider == OFFLINE_PROVIDER:
        from .offline import OfflineModel

        with _lock:
            handler = _own.setdefault(OFFLINE_PROVIDER, OfflineModel())
    return handler


def litellm_adapter(lm: Any, own: OwnProvider) -> object:
    """One of fsmchat's own in-process providers as a litellm custom provider, for the calls that
    go through litellm although their provider is in process: when litellm callbacks are
    registered or its debug log is on (they expect to see every call)."""
    class Adapter(lm.CustomLLM):  # type: ignore[misc]  # litellm is read as Any ([tool.mypy])
        async def acompletion(self, model: str, messages: list[dict[str, object]], *args: object,
                              optional_params: dict[str, object] | None = None,
                              litellm_params: dict[str, object] | None = None, **kwargs: object) -> object:
            meta = (litellm_params or {}).get("metadata")
            whole = await own.acompletion(model, messages, dict(optional_params or {}),
                                          dict(meta) if isinstance(meta, dict) else {})
            return lm.ModelResponse(**wire.body_of(whole))

        async def astreaming(self, model: str, messages: list[dict[str, object]], *args: object,
                             optional_params: dict[str, object] | None = None,
                             litellm_params: dict[str, object] | None = None,
                             **kwargs: object) -> AsyncIterator[dict[str, object]]:
            meta = (litellm_params or {}).get("metadata")
            whole = await own.acompletion(model, messages, dict(optional_params or {}),
                                          dict(meta) if isinstance(meta, dict) else {})
            for chunk in litellm_chunks(whole):
                yield chunk

    return Adapter()


def register_provider(name: str, handler: object) -> None:
    """Add a litellm custom provider, keeping whatever the user registered already."""
    with _lock:
        _providers[name] = handler
        if _litellm is not None:
            _install(_litellm, name, handler)



def registered(provider: str) -> bool:
    """Whether a litellm custom provider named ``provider`` (a model string's prefix) was registered
    through fsmchat (``register_provider``; fsmchat's own in-process providers too, once litellm is
    imported)."""
    return provider in _providers

def _install(lm: Any, name: str, handler: object) -> None:
    if not any(p.get("provider") == name for p in lm.custom_provider_map):
        own = name.startswith("fsmchat-")
        lm.custom_provider_map.append({"provider": name, "custom_handler": _free(lm, handler) if own else handler})


def priced_free(response: object) -> object:
    """Mark a response as costing nothing (``_hidden_params["response_cost"] = 0.0``): litellm then
    reports that cost instead of searching its cost map for the model on every call."""
    hidden = getattr(response, "_hidden_params", None)
    if isinstance(hidden, dict):
        hidden.setdefault("response_cost", 0.0)
    return response


def _free(lm: Any, handler: Any) -> object:
    """``handler`` (one of fsmchat's own custom providers) with every response marked free."""

    class Free(lm.CustomLLM):  # type: ignore[misc]  # litellm is read as Any ([tool.mypy])
        def completion(self, *args: object, **kwargs: object) -> object:
            return priced_free(handler.completion(*args, **kwargs))

        async def acompletion(self, *args: object, **kwargs: object) -> object:
            return priced_free(await handler.acompletion(*args, **kwargs))

        def streaming(self, *args: object, **kwargs: object) -> object:
            return handler.streaming(*args, **kwargs)

        def astreaming(self, *args: object, **kwargs: object) -> object:
            return handler.astreaming(*args, **kwargs)

        def __getattr__(self, name: str) -> object:
            return getattr(handler, name)

    return Free()


def lean(lm: object) -> None:
    """Switch off litellm's per-call work that fsmchat does not use (idempotent). Today that is
    the base64 scan: litellm walks and copies every request's messages to shorten base64 images in
    the payload it logs (18% of a call at 1,000 messages), unless ``MAX_BASE64_LENGTH_FOR_LOGGING``
    is 0; fsmchat sets it to 0 unless the user set the variable. It is read from a module global of
    ``litellm.litellm_core_utils.logging_utils`` at call time; tests/speakers/test_litellm_cost.py pins that."""
    if BASE64_LOG_ENV not in os.environ:
        from litellm.litellm_core_utils import logging_utils

        logging_utils.MAX_BASE64_LENGTH_FOR_LOGGING = 0


def loading() -> bool:
    """Whether litellm's first import is under way (a live status line says so meanwhile)."""
    return _loading.is_set()


def needs_litellm(agent: object) -> bool:
    """Whether ``agent``'s requests go through litellm: a model-backed agent whose model is not
    one of fsmchat's own providers and is not an OpenAI-compatible endpoint the fast path serves
    (``wire.static_blocker``), or that asks for ``transport="litellm"``."""
    kwargs = getattr(agent, "litellm_kwargs", None)
    if kwargs is None or not hasattr(agent, "model"):
        return False
    if getattr(agent, "transport", "auto") == "litellm":
        return True
    resolved = resolve_model(agent.model)
    return own_handler(resolved) is None and wire.static_blocker(resolved, kwargs) is not None


async def load_litellm(agents: Iterable[object] | None) -> None:
    """Import litellm now, in a worker thread (the event loop keeps running), if it is not yet
    imported and any of ``agents`` reaches its model through it (``needs_litellm``: never the
    offline or scripted models, nor the fast path). A run calls this before its clock starts, so the
    import's seconds (3 to 50 on a loaded machine) count neither against ``deadline_s`` nor in step times."""
    if _litellm is None and any(needs_litellm(a) for a in agents or ()):
        await asyncio.to_thread(get_litellm)


def get_litellm() -> Any:
    """Import litellm on first use (never at ``import fsmchat``), offline cost map by default."""
    global _litellm
    if _litellm is None:
        with _lock:
            if _litellm is None:
                _loading.set()
                try:
                    _litellm = _import_litellm()
                finally:
                    _loading.clear()
                keep_out_of_collections()  # after _litellm is set: a finalizer the collection runs finds it
    return _litellm


def _import_litellm() -> object:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    lm = wire.import_litellm_part("litellm")

    lm.suppress_debug_info = True
    lean(lm)
    log_secrets.install()  # mask secrets in litellm's, the OpenAI SDK's, httpx's and fsmchat's log records
    own_handler(OFFLINE_PROVIDER)
    for name, handler in _own.items():
        _providers.setdefault(name, litellm_adapter(lm, handler))
    for name, provider in _providers.items():
        _install(lm, name, provider)
    return lm


def keep_out_of_collections() -> None:
    """Leave what exists now, litellm's import above all, out of every later garbage collection.

    litellm's import leaves some 380,000 tracked objects (its cost map, modules and classes) that live
    as long as the process. A full collection walks every tracked object, about 0.2 s for these alone
    on a 2-core machine, and a busy batch of model calls starts one every few hundred calls (the
    requests in flight are what it promotes). After one collection (so no garbage is kept), everything
    tracked is moved to the collector's permanent generation (``gc.freeze``): later collections walk
    only what the program made since. A frozen object is still freed when its last reference goes;
    a reference cycle among frozen objects is never collected, and ``gc.get_objects()`` and
    ``gc.get_referrers()`` no longer list frozen objects. ``FSMCHAT_GC_FREEZE=0`` leaves them all in."""
    if os.environ.get(GC_FREEZE_ENV, "1") == "0":
        return
    gc.collect()
    gc.freeze()



_CREDENTIAL_WORDS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")
_OWN_ENDPOINT = ("api_key", "api_base", "base_url", "azure_ad_token", "aws_profile_name", "aws_access_key_id",
                 "aws_role_name", "aws_web_identity_token", "vertex_credentials", "vertex_project")


API_BASE_ENV = "FSMCHAT_API_BASE"  # `fsmchat run --api-base URL`: the endpoint of agents without one of their own
NO_KEY = "fsmchat-no-key"  # the api_key sent to an endpoint of the user's own that needs none


def own_provider(model: str | None) -> bool:
    """Whether ``model`` is answered by a provider registered in this process (fsmchat's own, a test's)."""
    resolved = resolve_model(model)
    return resolved.split("/", 1)[0] in _providers or resolved.split("/", 1)[0] in _own or \
        resolved.startswith("fsmchat-")


def client_demands_key(model: str | None) -> bool:
    """Whether litellm's client for ``model`` refuses to send a request without an API key it cannot
    find (e.g. the OpenAI SDK's "Missing credentials" for ``openai/...``). An agent with an endpoint of
    its own (``api_base``) and no key is then given ``NO_KEY``: a local server needs none."""
    if own_provider(model):
        return False
    try:
        env = get_litellm().validate_environment(model=resolve_model(model))
    except Exception:
        return False
    keys = [k for k in env.get("missing_keys") or [] if any(w in k.upper() for w in _CREDENTIAL_WORDS)]
    return not env.get("keys_in_environment") and bool(keys)


def missing_credentials(agents: Iterable[object]) -> MissingCredentials | None:
    """``MissingCredentials`` naming every model-backed agent whose provider needs a key that is
    neither in the environment nor passed to the agent (``litellm.validate_environment``), or None.
    fsmchat's own providers and agents with ``api_key``/``api_base`` (a local server: it needs no key,
    and ``Agent.litellm_kwargs`` supplies a placeholder where the client demands one) are skipped;
    litellm is imported only when some agent needs asking. ``FSMCHAT_CHECK_KEYS=0`` turns it off."""
    if os.environ.get("FSMCHAT_CHECK_KEYS", "1") == "0":
        return None
    missing = []
    seen: set[int] = set()
    for a in agents:
        kwargs = getattr(a, "litellm_kwargs", None)
        if kwargs is None or id(a) in seen or not hasattr(a, "model"):
            continue  # a callable speaker, a step: no provider
        seen.add(id(a))
        if any(kwargs.get(k) for k in _OWN_ENDPOINT):
            continue
        model = resolve_model(a.model)
        if model.split("/", 1)[0] in _providers or model.startswith("fsmchat-"):
            continue
        try:
            env = get_litellm().validate_environment(model=model)
        except Exception:
            continue
        keys = [k for k in env.get("missing_keys") or [] if any(w in k.upper() for w in _CREDENTIAL_WORDS)]
        if not env.get("keys_in_environment") and keys:
            missing.append((getattr(a, "name"), a.model or model, keys))
    return MissingCredentials(missing) if missing else None


class UnknownModel(ConfigError):
    """Agents whose model names no provider litellm can route (``"gpt4o"``): refused before the
    run's first request, naming each agent, what a model name looks like and the closest names in
    litellm's model map. Nothing was sent; the run ends with ``stop_reason="error"`` and this error.

    Examples:
        >>> from fsmchat.speakers.llm import UnknownModel
        >>> print(UnknownModel([("writer", "gpt4o", ["gpt-4o", "gpt-4"])]))
        agent 'writer': model='gpt4o' names no provider: a model name is 'provider/model' ('openai/gpt-4o-mini', 'anthropic/claude-sonnet-4-5', 'ollama/llama3', or 'openai/<name>' with an api_base for an OpenAI-compatible server) or a name litellm knows; the closest known: 'gpt-4o', 'gpt-4'
    """

    def __init__(self, unknown: list[tuple[str, str, list[str]]]):
        self.unknown = unknown
        lines = []
        for agent, model, close in unknown:
            near = f"; the closest known: {', '.join(map(repr, close))}" if close else ""
            lines.append(f"agent {agent!r}: model={model!r} names no provider: a model name is 'provider/model' "
                         "('openai/gpt-4o-mini', 'anthropic/claude-sonnet-4-5', 'ollama/llama3', or 'openai/<name>' "
                         f"with an api_base for an OpenAI-compatible server) or a name litellm knows{near}")
        super().__init__("\n".join(lines))


def unknown_models(agents: Iterable[object] | None) -> UnknownModel | None:
    """``UnknownModel`` naming every model-backed agent whose model litellm cannot route to a
    provider (``litellm.get_llm_provider``), or None; fsmchat's own providers are never asked
    (litellm is imported only when some agent needs it)."""
    unknown = []
    seen: set[int] = set()
    for a in agents or ():
        kwargs = getattr(a, "litellm_kwargs", None)
        if kwargs is None or id(a) in seen or not hasattr(a, "model"):
            continue
        seen.add(id(a))
        model = resolve_model(a.model)
        if own_provider(model) or wire.eligible(model, kwargs):
            continue
        lm = get_litellm()
        try:
            lm.get_llm_provider(model=model, custom_llm_provider=kwargs.get("custom_llm_provider"),
                                api_base=kwargs.get("api_base") or kwargs.get("base_url"))
        except Exception:
            close = difflib.get_close_matches(model, list(lm.model_cost), 3, 0.6)
            unknown.append((getattr(a, "name"), a.model or model, close))
    return UnknownModel(unknown) if unknown else None
