"""Layer 1: one rule for masking secrets, applied by every channel that shows or stores a text.

Error messages, exception chains, log records, checkpointed stop events, the CLI, the viewer's
JSON and reports and Ray payloads all pass through ``redact`` / ``redact_data`` /
``redact_chain``. It sits below ``fsmchat.errors`` because a ``ModelCallError`` masks its own
message, and below the engine because a run's error event is masked before it is stored.
"""
from __future__ import annotations

import functools
import json
import os
import re
import threading
from typing import Iterable, Mapping, Sequence, TypeVar, cast

_T = TypeVar("_T")


# A secret is (a) the value of anything an agent sends as a credential or a header (``api_key``,
# every ``extra_headers`` value, ``Authorization``, ``aws_secret_access_key``, ``vertex_credentials``
# ...), registered when the agent is made and again when its call fails; (b) the value of every
# credential-named environment variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``HF_TOKEN``...);
# (c) anything shaped like one (``Bearer ...``, ``sk-...``, ``name='value'`` under a secret name).
# ``redact`` applies the rule to a text; every channel that shows or stores an error calls it (error
# messages, the exception chain, log records, checkpointed stop events, the CLI, the viewer's
# JSON and reports, Ray payloads). Values shorter than ``MIN_SECRET_CHARS`` are masked only where
# a name or a shape shows them: masking every "true" or "eu" would garble the text.
MASK = "***"
MIN_SECRET_CHARS = 8
HEADER_OPTIONS = ("extra_headers", "headers", "default_headers")  # every value sent in these is a secret
_SECRET_PARTS = {"key", "apikey", "token", "secret", "password", "passwd", "authorization", "auth", "credential",
                 "credentials", "cookie", "bearer"}
_TOKEN_COUNT = re.compile(r"^(max|min|budget|num|total|prompt|completion|reasoning)(_[a-z]+)*_tokens$")
_SCHEME = re.compile(r"^(?:bearer|basic|token|apikey|key)\s+(\S+)$", re.I)
_SHAPES = re.compile(r"(?i)(bearer\s+)(?!\*\*\*)[^\s'\",]+|\b((?:sk|pk|rk|gsk|xai|hf)[-_][A-Za-z0-9_\-]{6,})"
                     r"|\b(AIza[0-9A-Za-z_\-]{10,})")
# every name is_secret accepts, and every shape of _SHAPES, contains one of these
_NAME_WORDS = ("key", "token", "secret", "passw", "auth", "credential", "cookie", "bearer")
_SHAPE_WORDS = ("bearer", "sk-", "sk_", "pk-", "pk_", "rk-", "rk_", "xai-", "xai_", "hf-", "hf_", "aiza")  # gsk_: sk_
_SHAPE_WORD = re.compile("|".join(map(re.escape, _SHAPE_WORDS)))  # one search of a lowercased text
_ANY_WORD = re.compile("|".join(map(re.escape, _SHAPE_WORDS + _NAME_WORDS)))
# 'name': 'value'  "name": "value"  'name'='value'  (b'name', b'value')
_QUOTED = re.compile(r"""(?P<q>['"])(?P<name>[^'"\n]{1,80})(?P=q)(?P<sep>\s*[:=,]\s*)(?P<b>b?)(?P<vq>['"])"""
                     r"""(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)""")
# name='value'  name=value  (keyword arguments, query strings, environment variables)
_KEYWORD = re.compile(r"""(?<![\w'"-])(?P<name>[A-Za-z_][\w-]{0,79})(?P<sep>=)(?:(?P<vq>['"])"""
                      r"""(?P<qvalue>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)|(?P<value>[^\s'",)}&]+))""")
# Name: value  (header lines, curl's -H 'Name: value')
_HEADER = re.compile(r"""(?<![\w-])(?P<name>[A-Za-z][\w-]{0,79})(?P<sep>:[ \t]*)(?P<value>[^'"\s,}][^'"\n,}]*)""")
_registry_lock = threading.Lock()
_registered: tuple[str, ...] = ()  # the values agents registered (replaced whole, so readers need no lock)


@functools.lru_cache(maxsize=4096)  # the same few names (dict keys, headers, variables) are asked again and again
def is_secret(name: str) -> bool:
    """Whether a keyword names a secret: ``api_key``, ``x-api-key``, ``access_token``,
    ``Authorization``, ``OPENAI_API_KEY``... but not counts such as ``max_tokens``.

    Examples:
        >>> from fsmchat.common.masking import is_secret
        >>> [is_secret(n) for n in ("api_key", "X-Token", "aws_secret_access_key", "vertex_credentials", "max_tokens")]
        [True, True, True, True, False]
    """
    lowered = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()  # accessToken -> access_token
    parts = re.split(r"[_\-\s.]+", lowered)
    if any(p in _SECRET_PARTS for p in parts) or lowered.endswith(("apikey", "api_key", "secret")):
        return True
    return "tokens" in parts and not _TOKEN_COUNT.match(lowered)  # api_tokens yes; max_tokens no


def secret_values(options: Mapping[str, object]) -> list[str]:
    """The secret values among an agent's options: every string under a secret-named key (at any
    depth), every header value (``extra_headers``, ``headers``, ``default_headers``), and the token
    of a ``"Bearer <token>"``-style value on its own. A JSON text under a secret name (a service
    account's ``vertex_credentials``) also gives its secret-named fields.

    Examples:
        >>> from fsmchat.common.masking import secret_values
        >>> secret_values({"api_key": "k-123", "temperature": 0.2, "extra_headers": {"X-Region": "eu-west-1"},
        ...                "extra_body": {"auth_token": "t-456"}})
        ['k-123', 'eu-west-1', 't-456']
    """
    out: list[str] = []

    def leaves(value: object) -> None:
        if isinstance(value, str):
            out.append(value)
            scheme = _SCHEME.match(value.strip())
            if scheme:
                out.append(scheme.group(1))
            if value.lstrip().startswith("{"):
                try:
                    parsed = json.loads(value)
                except ValueError:
                    return
                if isinstance(parsed, dict):
                    walk(parsed, False)
        elif isinstance(value, Mapping):
            for v in value.values():
                leaves(v)
        elif isinstance(value, (list, tuple)):
            for v in value:
                leaves(v)

    def walk(value: object, headers: bool) -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                if headers or (isinstance(k, str) and is_secret(k)):
                    leaves(v)
                else:
                    walk(v, isinstance(k, str) and k in HEADER_OPTIONS)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, headers)

    walk(options, False)
    return list(dict.fromkeys(out))


def register_secrets(values: Iterable[object]) -> None:
    """Remember ``values`` as secrets of this process: ``redact`` masks them wherever they appear.
    Agents register their credential and header values when they are made; texts shorter than
    ``MIN_SECRET_CHARS`` are ignored (a name or shape still masks them)."""
    global _registered
    fresh = [v for v in values if isinstance(v, str) and len(v.strip()) >= MIN_SECRET_CHARS and v != MASK
             and v not in _registered]
    if fresh:
        with _registry_lock:
            _registered = tuple(dict.fromkeys([*_registered, *fresh]))


_known: tuple[tuple[str, ...], object, list[str], bool] = ((), None, [], True)
# (registered, environment (only compared), their secrets longest first, whether each is written as itself in JSON)
_ESCAPED_IN_JSON = re.compile(r'["\\\x00-\x1f]')  # what json.dumps writes as an escape


def _secrets() -> tuple[list[str], bool]:
    """(``known_secrets()``, whether each appears in a JSON text as itself: no quote, backslash or
    control character). The environment may change at any time, so it is compared with the one the
    list was made from on every call (its raw entries: a C-level comparison of a few dozen pairs),
    and the list is made again when it or the registered values changed."""
    global _known
    raw = getattr(os.environ, "_data", None)  # CPython's encoded entries; else a decoded copy
    environment = raw if isinstance(raw, dict) else dict(os.environ)
    registered, seen, secrets, plain = _known
    if registered is _registered and seen == environment:
        return secrets, plain
    found = dict.fromkeys(_registered)
    for name, value in list(os.environ.items()):
        if is_secret(name) and len(value.strip()) >= MIN_SECRET_CHARS:
            found[value] = None
    secrets = sorted(found, key=len, reverse=True)
    plain = not any(_ESCAPED_IN_JSON.search(x) for x in secrets)
    _known = (_registered, dict(environment), secrets, plain)
    return secrets, plain


def known_secrets() -> list[str]:
    """Every secret value ``redact`` masks now, longest first: the registered ones and the values
    of the credential-named environment variables (as they are now: the environment may change)."""
    return list(_secrets()[0])


def _quoted(m: re.Match[str]) -> str:
    if not is_secret(m.group("name")) or not m.group("value") or m.group("value") == MASK:
        return m.group(0)
    q, vq = m.group("q"), m.group("vq")
    return f"{q}{m.group('name')}{q}{m.group('sep')}{m.group('b')}{vq}{MASK}{vq}"


def _keyword(m: re.Match[str]) -> str:
    value = m.group("qvalue") or m.group("value")
    if not is_secret(m.group("name")) or not value or value == MASK:
        return m.group(0)
    vq = m.group("vq") or ""
    return f"{m.group('name')}={vq}{MASK}{vq}"


_HEADER_WORDS = {"authorization", "proxy-authorization", "cookie", "set-cookie"}  # values with spaces


def _header(m: re.Match[str]) -> str:
    # a header's name: hyphenated, one capitalised word or a known one, never prose ("credentials:")
    # nor an exception's type ("MissingCredentials: ..."); its value one token, except for the
    # headers whose values have spaces ("Basic abc", "a=b; c=d"): "Key: the main point" is prose
    name, value = m.group("name"), m.group("value").strip()
    known = name.lower() in _HEADER_WORDS
    header_like = known or "-" in name or (name[0].isupper() and name[1:].islower())
    if not header_like or not is_secret(name) or value == MASK or (" " in value and not known):
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{MASK}"


def redact(text: str, *secrets: object) -> str:
    """``text`` with every secret masked as ``***``: the known values (``known_secrets``, and
    ``secrets`` given here), then the value of every secret-named entry in the shapes errors and
    logs carry (dict reprs and JSON, header tuples, ``name=value``, ``Name: value``), then API keys
    and bearer tokens anywhere.

    Examples:
        >>> from fsmchat.common.masking import redact
        >>> redact('denied: {"x-token": "tok-1", "model": "m"} key=abc Authorization: Bearer xyz')
        'denied: {"x-token": "***", "model": "m"} key=*** Authorization: ***'
    """
    given = [s for s in secrets if isinstance(s, str) and len(s) >= 4 and s != MASK]
    return _redact(text, sorted(given, key=len, reverse=True) + known_secrets())


def _redact(text: str, values: list[str]) -> str:
    if not isinstance(text, str) or not text:
        return text
    for s in values:
        if s in text:
            text = text.replace(s, MASK)
    low = text.lower()
    if _ANY_WORD.search(low) is None:  # no secret name, no key shape: nothing below matches
        return text
    shaped = _SHAPE_WORD.search(low) is not None
    if "'" in text or '"' in text:
        text = _QUOTED.sub(_quoted, text)
    if "=" in text:
        text = _KEYWORD.sub(_keyword, text)
    if ":" in text:
        text = _HEADER.sub(_header, text)
    if shaped:
        text = _SHAPES.sub(lambda m: (m.group(1) + MASK) if m.group(1) else MASK, text)
    return text


def redact_data(value: _T, keep: Iterable[str] = ()) -> _T:
    """``value`` (JSON-like data) with every text redacted and every secret-named entry's value
    replaced by ``***``; other values are kept as they are, and so are the entries named in ``keep``
    (at any depth; a drawing's SVG, say).

    Examples:
        >>> from fsmchat.common.masking import redact_data
        >>> redact_data({"error": "denied for api_key=k-1", "headers": {"X-Token": "t-2"}, "n": 3})
        {'error': 'denied for api_key=***', 'headers': {'X-Token': '***'}, 'n': 3}
    """
    (known, plain), kept = _secrets(), frozenset(keep)
    if plain and not kept and _nothing_to_mask(value, known):
        return value

    def walk(v: object) -> object:
        if isinstance(v, str):
            return _redact(v, known)
        if isinstance(v, Mapping):
            return {k: v2 if k in kept else MASK if isinstance(k, str) and is_secret(k) and isinstance(v2, str) and v2
                    else walk(v2) for k, v2 in v.items()}
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, tuple):
            return tuple(walk(x) for x in v)
        return v

    return cast(_T, walk(value))


_JSON = json.JSONEncoder(ensure_ascii=False, check_circular=False, separators=(",", ":"))


def _nothing_to_mask(value: object, known: list[str]) -> bool:
    """Whether ``redact_data`` would leave ``value`` as it is, judged on its JSON text in one pass:
    no known secret value in it, and none of the words every secret name and shape contains
    (``_ANY_WORD``). False when it is not plain JSON data (then the data is walked)."""
    try:
        text = _JSON.encode(value)
    except (TypeError, ValueError):
        return False
    return _ANY_WORD.search(text.lower()) is None and not any(s in text for s in known)


def clean(value: object) -> bool:
    """Whether ``value`` (JSON-like data; its texts, a JSON text among them, too) holds nothing
    ``redact_data`` or ``redact_json`` would mask, judged in one pass over its JSON text; False
    also when that cannot be told so (then mask its parts one by one). A store's writer asks it
    once for a whole commit.

    Examples:
        >>> from fsmchat.common.masking import clean
        >>> clean([{"score": 0.9, "message": "Ship it."}, "[1, 2]"]), clean({"error": "api_key=k-1"})
        (True, False)
    """
    known, plain = _secrets()
    return plain and _nothing_to_mask(value, known)


def clean_texts(texts: Sequence[str], encoded: Sequence[str] = ()) -> bool:
    """Whether nothing in ``texts`` (masked as they are: ``redact``, ``redact_json``) and in
    ``encoded`` (compact JSON texts of data, non-ASCII escaped: masked as ``redact_data`` masks the
    data) would be masked, judged in one pass over their join, as ``clean`` judges data; False
    also when that cannot be told so: a known secret that JSON writes escaped, or a ``\\u`` escape
    in an encoded text (the data then holds a character its JSON does not show as itself). A
    store's writer asks it once for a whole commit, on the texts it writes.

    Examples:
        >>> from fsmchat.common.masking import clean_texts
        >>> clean_texts(["Ship it."], ['{"score":0.9}']), clean_texts(["ok"], ['{"api_key":"k-1"}'])
        (True, False)
    """
    known, plain = _secrets()
    data = "\x00".join(encoded)
    if not plain or "\\u" in data:
        return False
    text = "\x00".join(texts) + "\x00" + data  # each text whole in it: a match in one is a match here
    return _ANY_WORD.search(text.lower()) is None and not any(s in text for s in known)


def redact_json(text: str | None) -> str | None:
    """A JSON text with every secret masked as ``redact_data`` masks its data: by value and shape
    first on the text (the common case: nothing to mask, and the text is returned as it is), then,
    when something matched, on the parsed data, so the masked text is still the same JSON
    structure (a store reads it back as state).

    Examples:
        >>> from fsmchat.common.masking import redact_json
        >>> redact_json('[["s",["x"],"tool failed: api_key=k-1"],["s",["n"],3]]')
        '[["s", ["x"], "tool failed: api_key=***"], ["s", ["n"], 3]]'
    """
    if not isinstance(text, str) or _redact(text, _secrets()[0]) == text:
        return text
    return json.dumps(redact_data(json.loads(text)))


def exception_chain(exc: BaseException | None) -> list[BaseException]:
    """``exc`` and every exception it carries, outermost first: ``__cause__``, ``__context__``,
    a wrapper's ``cause`` / ``original_exception``, an exception group's members."""
    out: list[BaseException] = []
    seen: set[int] = set()
    todo: list[object] = [exc]
    while todo:
        e = todo.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        out.append(e)
        todo += [*reversed(getattr(e, "exceptions", None) or ()), getattr(e, "original_exception", None),
                 getattr(e, "cause", None), e.__context__, e.__cause__]
    return out


def redact_chain(exc: BaseException) -> BaseException:
    """Mask secrets in ``exc`` and in every exception it carries (``exception_chain``), in place:
    their arguments, their text attributes (litellm's ``message``, an OpenAI error's ``body``) and
    notes, so ``str``, ``repr``, ``traceback.format_exception`` and ``logging.exception`` show
    ``***`` for each. Returns ``exc``."""
    for e in exception_chain(exc):
        try:
            e.args = tuple(redact_data(a) for a in e.args)
        except (AttributeError, TypeError):
            pass
        if isinstance(e, OSError):
            for attr in ("strerror", "filename", "filename2"):
                if isinstance(getattr(e, attr, None), str):
                    setattr(e, attr, redact(getattr(e, attr)))
        for name, value in list(getattr(e, "__dict__", {}).items()):
            if isinstance(value, (str, dict, list, tuple)):
                try:
                    setattr(e, name, redact_data(value))
                except (AttributeError, TypeError):  # a read-only property
                    pass
    return exc
