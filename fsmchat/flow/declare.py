"""How a flow block kind is declared once, as a pattern is: by one pydantic model (a ``BlockConfig``).

``class Loop(Block, kind="loop", config=LoopConfig)``: the model's fields, in order, are the
block's constructor parameters and its attributes (``each.over``); its validator holds the block's
checks (a bad value is refused with the error the block documents); and the block's config form
(``Loop.Spec``, registered in ``STEP_KINDS``) is derived from it: the same field names and defaults,
a field holding live objects (steps, callables, speakers) written and read by its ``Form``.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Annotated, Any, Callable, ClassVar, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, ValidationError, create_model, \
    model_serializer
from pydantic.fields import FieldInfo

from ..config.convert import REF, STEP_KINDS, AnyStep, ConfigReader, ConfigSpec, ConfigWriter, without_later_defaults
from ..config.values import jsonable, opt_ref
from ..errors import invalid_config
from ..patterns.declare import bind_arguments, field_parameters

REQUIRED: object = object()  # a config-form field with no default (its live default only says "missing")


@dataclass(frozen=True)
class Form:
    """How a block field holding live objects travels in the block's config form.

    Attributes:
        data: The field's type in the config form.
        dump: ``dump(writer, value, what)``: the live value as data.
        load: ``load(reader, data, what)``: the live value again.
        default: The config form's default: ``REQUIRED``, a value, or (for a list) ``list``.
        expression: For a condition: the config-form field holding it when it is an expression
            (``"{{score}} > 80"``, written as its text); a callable travels as an import path.
        label: How ``what`` names the field (by default its name): ``"Discussion 'd' speaker"``.
    """

    data: object
    dump: Callable[[ConfigWriter, object, str], object]
    load: Callable[[ConfigReader, object, str], object]
    default: object = None
    expression: str | None = None
    label: str | None = None


def _dump_fn(w: ConfigWriter, value: object, what: str) -> str | None:
    return opt_ref(value, what)


def _load_fn(r: ConfigReader, data: object, what: str) -> object:
    return r.fn(data if isinstance(data, str) else None, what)  # its Form's data: an import path, or None


def _dump_steps(w: ConfigWriter, value: object, what: str) -> list[object]:
    return w.steps(value or [])


def _load_steps(r: ConfigReader, data: object, what: str) -> list[object]:
    return r.steps(data if isinstance(data, list) else [])  # its Form's data: a list of steps


def _dump_routes(w: ConfigWriter, value: object, what: str) -> dict[str, list[object]]:
    return {k: w.steps(s) for k, s in value.items()} if isinstance(value, dict) else {}  # route's check: a dict


def _load_routes(r: ConfigReader, data: object, what: str) -> dict[str, list[object]]:
    return {k: r.steps(s) for k, s in data.items()} if isinstance(data, dict) else {}  # its Form's data: a dict


STEPS = Form(list[AnyStep], _dump_steps, _load_steps, default=REQUIRED)
"""How a block field holding steps travels: a list of step config forms, required.

Examples:
    >>> from typing import Annotated, Any
    >>> from fsmchat.flow import STEPS, BlockConfig
    >>> class TwiceConfig(BlockConfig):
    ...     steps: Annotated[Any, STEPS] = None
    ...     name: str = "twice"
    >>> TwiceConfig(steps=["a step"]).steps
    ['a step']
"""
MORE_STEPS = Form(list[AnyStep], _dump_steps, _load_steps, default=list)
"""Steps that may be left out (``else_steps``, a route's ``default``)."""
ROUTES = Form(dict[str, list[AnyStep]], _dump_routes, _load_routes, default=REQUIRED)
"""Key -> steps."""
FUNCTION = Form(Annotated[Optional[str], REF], _dump_fn, _load_fn)
"""A module-level function, by import path."""
ITEMS = Form(str | list[object], lambda w, v, what: v if isinstance(v, str) else jsonable(v, what),
             lambda r, d, what: d, default="items")
"""A variable's name, or a literal list (as JSON)."""


def condition_form(expression: str, default: object = None) -> Form:
    """A condition: a callable by import path, or an expression by its text in ``expression``."""
    return Form(Annotated[Optional[str], REF], _dump_fn, _load_fn, default=default, expression=expression)


class BlockConfig(BaseModel):
    """Base of every flow step kind's one model: its fields are the step's parameters and attributes.

    A kind's checks are its model's validator; an fsmchat error it raises is raised as it is, any
    other bad value is a ``ConfigError`` naming the field. A field holding live objects says how
    it travels in the config form with a ``Form`` (``STEPS``: steps).

    Examples:
        >>> from fsmchat.flow import BlockConfig
        >>> class PauseConfig(BlockConfig):
        ...     seconds: float = 1.0
        >>> PauseConfig(seconds=2).seconds
        2.0
        >>> PauseConfig("Pause", minutes=1)
        Traceback (most recent call last):
        ...
        fsmchat.errors.ConfigError: Pause: unknown option 'minutes'
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    def __init__(self, owner: str | None = None, /, **values: object) -> None:
        """Validate ``values``; a bad one is refused in ``owner``'s name.

        Args:
            owner: Whose name a refusal is given in (the model's by default).
            **values: The fields.
        """
        try:
            super().__init__(**values)
        except ValidationError as exc:
            raise invalid_config(owner or type(self).__name__, exc) from None


def form_of(field: FieldInfo) -> Form | None:
    return next((m for m in field.metadata if isinstance(m, Form)), None)


LATER_BLOCK_FIELDS: dict[str, object] = {"context": None}
"""A block's config fields added after version 1 (a Discussion's ``context``), with the value that
leaves them out of a config."""


class BlockSpec(ConfigSpec):
    """What every block kind's config form is: its fields, and ``build`` (the block again)."""

    block_type: ClassVar[type[Declared] | None] = None  # the block class the kind builds

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, object]:
        """Block fields added after version 1 are written only when set (``LATER_BLOCK_FIELDS``):
        a config written before them reads back equal."""
        return without_later_defaults(handler(self), LATER_BLOCK_FIELDS)

    def build(self, r: ConfigReader) -> object:
        """The block, built from the fields (each live one loaded by its ``Form``)."""
        block = self.block_type
        assert block is not None and block.Config is not None  # block_spec derived this form from both
        values: dict[str, object] = {}
        for name, f in block.Config.model_fields.items():
            form, data = form_of(f), getattr(self, name)
            if form is None:
                values[name] = data
            elif form.expression is not None and getattr(self, form.expression) is not None:
                values[name] = getattr(self, form.expression)
            else:
                values[name] = form.load(r, data, self.ref_label(form.label or name))
        return block(**values)


def block_spec(block: type[Declared], kind: str, owner: str) -> type[BlockSpec]:
    """Derive the config form of ``block`` (a Block class with a ``Config`` model) under ``kind``."""
    config = block.Config
    assert config is not None  # Declared.__init_subclass__ refuses a kind without one
    fields: dict[str, Any] = {"kind": (Literal[kind], kind)}  # create_model's field definitions (type forms)
    for name, f in config.model_fields.items():
        form = form_of(f)
        default = f.default if form is None or form.default is None else form.default
        data = f.annotation if form is None else form.data
        if form is None and f.metadata:  # a plain field keeps its rules (a number's): a config is held to them too
            data = Annotated.__class_getitem__((data, *f.metadata))  # type: ignore[attr-defined]  # Annotated[data, *rules]
        if default is REQUIRED:
            info = Field(description=f.description)
        elif default is list:
            info = Field(default_factory=list, description=f.description)
        else:
            info = Field(default, description=f.description)
        fields[name] = (data, info)
        if form is not None and form.expression is not None:
            fields[form.expression] = (Optional[str], Field(None))
    spec = create_model(config.__name__.removesuffix("Config") + "Spec", __base__=BlockSpec,
                        __module__=block.__module__, **fields)
    spec.__qualname__ = f"{block.__qualname__}.Spec"
    spec.__doc__ = f"The config form of ``{block.__name__}`` (kind {kind!r}), derived from ``{config.__name__}``."
    spec.owner = owner
    spec.block_type = block
    return spec


def spec_of(block: Declared, w: ConfigWriter) -> BlockSpec:
    """``block`` as its config form: each field as it is, or written by its ``Form``."""
    spec: type[BlockSpec] = type(block).Spec
    values: dict[str, object] = {}
    for name, f in type(block.config).model_fields.items():
        form, value = form_of(f), getattr(block.config, name)
        what = f"{spec.owner} {getattr(block.config, 'name', None)!r} {form.label or name}" if form is not None \
            else name
        if form is None:
            values[name] = value
        elif form.expression is not None:
            values[name], values[form.expression] = w.condition(value, what) if value is not None else (None, None)
        else:
            values[name] = form.dump(w, value, what)
    return spec(**values)


class DeclaredField:
    """An attribute of a declared step that is a field of its model: read from ``step.config``."""

    def __init__(self, name: str):
        self.name = name

    def __get__(self, obj: Declared | None, owner: type | None = None) -> object:
        if obj is None:
            return self
        return getattr(obj.config, self.name)


class Declared:
    """Base of the step kinds declared once by their model: ``Task`` and every ``Block``.

    ``class Loop(Block, kind="loop", config=LoopConfig, owner="loop")``: the model's fields, in
    order, become the constructor's parameters (its signature) and read-only attributes; ``kind``
    derives the config form (``Loop.Spec``) and registers it in ``STEP_KINDS``; ``owner`` is how
    messages name the kind (``"if_ 'check' condition"``).
    """

    kind: ClassVar[str | None] = None
    Config: ClassVar[type[BlockConfig] | None] = None
    Spec: ClassVar[type[BlockSpec]]
    config: BlockConfig  # the step's validated model (its kind's ``Config``)

    def __init_subclass__(cls, kind: str | None = None, config: type[BlockConfig] | None = None,
                          owner: str | None = None, **kw: object) -> None:
        super().__init_subclass__(**kw)
        if config is not None:
            cls.Config = config
            for name in config.model_fields:
                if name not in cls.__dict__:
                    setattr(cls, name, DeclaredField(name))
            setattr(cls, "__signature__", inspect.Signature(field_parameters(config)))
        if kind is not None:
            if cls.Config is None:
                raise TypeError(f"{cls.__name__}: kind={kind!r} needs config=, the block's model (a BlockConfig)")
            cls.kind = kind
            cls.Spec = block_spec(cls, kind, owner or kind)
            STEP_KINDS.register(cls.Spec)

    def __init__(self, *args: object, **kwargs: object) -> None:
        """The model's fields, in order or by name (see the class's signature); a bad value is
        refused in the step's name, as its kind's messages name it (``"loop 'each': max_items=-1
        is invalid: ..."``)."""
        owner, model = type(self).__name__, type(self).Config
        if model is None:
            raise TypeError(f"{owner}: a step kind declares its model in its class line (config=...) or defines "
                            "its own __init__")
        values = bind_arguments(owner, list(model.model_fields), args, kwargs)
        spec = getattr(type(self), "Spec", None)
        kind = spec.owner if spec is not None else owner
        name = values.get("name", getattr(model.model_fields.get("name"), "default", None))
        self.config = model(f"{kind} {name!r}" if name is not None else kind, **values)

    def to_spec(self, w: ConfigWriter) -> object:
        """This step's config form (its kind's ``Spec``, derived from its model)."""
        if type(self).Config is None:
            raise TypeError(f"step {getattr(self, 'name', '?')!r}: a {type(self).__name__} has no config form")
        return spec_of(self, w)
