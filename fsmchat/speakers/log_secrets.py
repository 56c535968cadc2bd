"""Secrets never reach a log: the records of the loggers fsmchat drives (litellm's, the OpenAI
SDK's, httpx's, httpcore's and fsmchat's own) have every secret-named value masked, by the same
``is_secret`` rule that masks ``Agent`` reprs and configs.

litellm's DEBUG request log (``litellm._turn_on_debug()``, ``litellm.set_verbose = True`` or
``logging.basicConfig(level=logging.DEBUG)``) prints the request body, ``extra_headers``
included, as a dict repr and a curl command; the OpenAI SDK logs its request options. A
``logging.Filter`` on a logger sees only the records that logger creates (not its children's, not
propagated ones), so ``install()`` puts ``SecretLogFilter`` on each of these loggers and on every
existing child, and wraps the log record factory so the messages and exceptions of children
created later are masked too (their ``extra=`` fields are set after the factory runs, so only the
filter, on the installed loggers, masks those). Masking happens before any handler runs, so every
handler (litellm's own, the root logger's, a test's ``caplog``) sees the masked text.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Callable

from ..errors import mask_text

_SECRET_PARTS = {"key", "apikey", "token", "secret", "password", "passwd", "authorization", "auth", "credential",
                 "credentials", "cookie", "bearer"}
_TOKEN_COUNT = re.compile(r"^(max|min|budget|num|total|prompt|completion|reasoning)(_[a-z]+)*_tokens$")


def is_secret(name: str) -> bool:
    """Whether a keyword names a secret: ``api_key``, ``x-api-key``, ``access_token``,
    ``Authorization``... but not counts such as ``max_tokens``."""
    lowered = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()  # accessToken -> access_token
    parts = re.split(r"[_\-\s.]+", lowered)
    if any(p in _SECRET_PARTS for p in parts) or lowered.endswith(("apikey", "api_key", "secret")):
        return True
    return "tokens" in parts and not _TOKEN_COUNT.match(lowered)  # api_tokens yes; max_tokens no


LOGGERS = ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router", "httpx", "httpcore", "openai", "fsmchat")
MASK = "***"
_DONE = "_fsmchat_masked"

# 'name': 'value'  "name": "value"  'name'='value'  (b'name', b'value')
_QUOTED = re.compile(r"""(?P<q>['"])(?P<name>[^'"\n]{1,80})(?P=q)(?P<sep>\s*[:=,]\s*)(?P<b>b?)(?P<vq>['"])"""
                     r"""(?P<value>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)""")
# name='value'  name=value  (keyword arguments, query strings, environment variables)
_KEYWORD = re.compile(r"""(?<![\w'"-])(?P<name>[A-Za-z_][\w-]{0,79})(?P<sep>=)(?:(?P<vq>['"])"""
                      r"""(?P<qvalue>(?:\\.|(?!(?P=vq))[^\\\n])*)(?P=vq)|(?P<value>[^\s'",)}&]+))""")
# Name: value  (header lines, curl's -H 'Name: value')
_HEADER = re.compile(r"""(?<![\w-])(?P<name>[A-Za-z][\w-]{0,79})(?P<sep>:[ \t]*)(?P<value>[^'"\s,}][^'"\n,}]*)""")


def _quoted(m: re.Match[str]) -> str:
    if not is_secret(m.group("name")) or not m.group("value"):
        return m.group(0)
    q, vq = m.group("q"), m.group("vq")
    return f"{q}{m.group('name')}{q}{m.group('sep')}{m.group('b')}{vq}{MASK}{vq}"


def _keyword(m: re.Match[str]) -> str:
    if not is_secret(m.group("name")) or not (m.group("qvalue") or m.group("value")):
        return m.group(0)
    vq = m.group("vq") or ""
    return f"{m.group('name')}={vq}{MASK}{vq}"


def _header(m: re.Match[str]) -> str:
    if not is_secret(m.group("name")) or m.group("value") == MASK:
        return m.group(0)
    return f"{m.group('name')}{m.group('sep')}{MASK}"


def mask_log_text(text: str) -> str:
    """``text`` with the value of every secret-named entry (``is_secret``) replaced by ``***``, in
    the shapes logs carry: dict reprs and JSON, header tuples, ``name=value``, ``Name: value``
    header lines; then API keys and bearer tokens anywhere (``mask_text``)."""
    text = _QUOTED.sub(_quoted, text)
    text = _KEYWORD.sub(_keyword, text)
    text = _HEADER.sub(_header, text)
    return mask_text(text)


class SecretLogFilter(logging.Filter):
    """Masks a record in place (message, arguments, exception text, secret-named ``extra`` fields)
    and lets it through. Attach it to any logger or handler; ``install()`` does so for fsmchat's."""

    def filter(self, record: logging.LogRecord) -> bool:
        mask_record(record)
        return True


def mask_record(record: logging.LogRecord) -> logging.LogRecord:
    """Mask ``record`` in place: its message (formatted once, arguments dropped), exception and
    stack text, and its ``extra`` fields (secret-named ones become ``***``, texts are masked)."""
    if not getattr(record, _DONE, False):
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: keep the raw parts, masked
            message = f"{record.msg} {record.args}"
        record.msg, record.args = mask_log_text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_log_text(record.exc_text)
        if record.stack_info:
            record.stack_info = mask_log_text(record.stack_info)
        setattr(record, _DONE, True)
    for key, value in list(vars(record).items()):  # extra={...} fields are set after the record is made
        if key in _PLAIN or key == _DONE:
            continue
        if is_secret(key) and value:
            setattr(record, key, MASK)
        elif isinstance(value, str):
            setattr(record, key, mask_log_text(value))
    return record


_PLAIN = frozenset(vars(logging.LogRecord("x", 0, "", 0, "", None, None)))  # LogRecord's own fields
_FILTER = SecretLogFilter()
_install_lock = threading.Lock()


def covered(name: str) -> bool:
    """Whether a logger of this name is one fsmchat masks (one of ``LOGGERS`` or a child)."""
    return any(name == p or name.startswith(p + ".") for p in LOGGERS)


def _factory(inner: Callable[..., logging.LogRecord]) -> Callable[..., logging.LogRecord]:
    def make(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = inner(*args, **kwargs)
        return mask_record(record) if covered(record.name) else record
    setattr(make, "fsmchat_masking", True)  # marks the factory installed (install() looks for it)
    return make


def install() -> None:
    """Mask every record of ``LOGGERS`` and their children (idempotent; fsmchat calls it when it
    first imports litellm)."""
    with _install_lock:
        names = [n for n in list(logging.root.manager.loggerDict) if covered(n)]
        for name in dict.fromkeys([*LOGGERS, *names]):
            logger = logging.getLogger(name)
            if _FILTER not in logger.filters:
                logger.addFilter(_FILTER)
        current = logging.getLogRecordFactory()
        if not getattr(current, "fsmchat_masking", False):
            logging.setLogRecordFactory(_factory(current))
