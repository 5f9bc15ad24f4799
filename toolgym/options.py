"""Typed env options: an environment declares its options once, by the typed signature of its constructor, and every
entry point (`toolgym eval/serve/tools/synth/train -a key=value`, training configs' `env_args`, `export`, `TRLEnv`,
`load_env` from Python) checks what a user passes against that declaration.

The declaration is the signature a Python user already reads:

    class MazeEnv(StatefulToolEnv):
        def __init__(self, size: Annotated[int, Field(ge=3, le=50)] = 8,
                     layout: Literal["open", "rooms"] = "open", **options: Any) -> None:
            '''
            Args:
                size: Side of the square maze, in cells.
                layout: How walls are drawn.
            '''
            ...
            super().__init__(**options)

    def load_environment(**kwargs: Any) -> MazeEnv:     # the entry point: its return type names the class
        return MazeEnv(**kwargs)

- name, type and default come from the parameters; a range from `Annotated[..., Field(ge=..., le=...)]`; the
  one-line description from `Field(description=...)` or the docstring's `Args:` section (the class docstring or
  `__init__`'s), as for `@env_tool` methods (`toolgym.tool_schema`); `(choices: [...])` at the end of a
  description makes the option an enum.
- `**options` forwarded to the parent class continues the declaration with the parent's own (down to
  `StatefulToolEnv`'s `max_turns`, `tool_timeout`, `on_no_call`, `session_scope`, `server`), so a subclass only
  declares what it adds. A factory whose `**kwargs` lead nowhere typed (no return annotation naming a class) is
  *undeclared*: its options are passed through unchecked, as before.
- Values typed on a command line (`-a require_think=false`) are parsed by the declared type: JSON first (numbers,
  `true`/`false`, `null`, lists), then the raw text, then a comma-separated list; the first that validates wins.

An unknown option is an `EnvOptionError` naming the valid ones and the closest match; a value of the wrong type or
out of range is one too, naming the option, the value and the rule.

Policies declare their options the same way (a policy class's `__init__` chain, a scripted player's factory) and
are checked by name through the same `check_known` (`toolgym.policies.base.check_policy_options`).
"""

from __future__ import annotations

import difflib
import functools
import inspect
import json
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import pydantic
from pydantic.fields import FieldInfo

from toolgym.tool_schema import describe_annotation, parse_docstring

EMPTY = inspect.Parameter.empty


class OptionError(ValueError):
    """An option that is unknown, of the wrong type or out of range (a `ValueError`, so callers that report bad
    arguments report it too)."""


class EnvOptionError(OptionError):
    """An env option that is unknown, of the wrong type or out of range."""


@dataclass(frozen=True)
class EnvOption:
    """One declared option of an environment."""

    name: str
    annotation: Any  # the resolved type, with its `Annotated` metadata (description, range)
    default: Any  # `inspect.Parameter.empty` when the option is required
    description: str

    @property
    def required(self) -> bool:
        return self.default is EMPTY

    @property
    def type_name(self) -> str:
        """The type as a user reads it: `float`, `bool`, `"game" | "move"`, `str | None`, `list[str]`."""
        return _type_name(self.annotation)

    @property
    def range(self) -> str:
        """The declared bounds: `0 <= x <= 1`, `>= 1`, `> 0` (empty when there are none)."""
        lo = hi = ""
        for m in _metadata(self.annotation):
            for attr, sym in (("ge", ">="), ("gt", ">")):
                if getattr(m, attr, None) is not None:
                    lo = f"{sym} {getattr(m, attr)}"
            for attr, sym in (("le", "<="), ("lt", "<")):
                if getattr(m, attr, None) is not None:
                    hi = f"{sym} {getattr(m, attr)}"
        if lo and hi:
            return f"{lo.split()[1]} {'<=' if lo[1] == '=' else '<'} x {hi}"
        return lo or hi

    def default_text(self) -> str:
        if self.required:
            return "(required)"
        return json.dumps(self.default) if isinstance(self.default, (str, int, float, bool, list, type(None))) \
            else repr(self.default)


def _metadata(annotation: Any) -> list[Any]:
    out: list[Any] = []
    if typing.get_origin(annotation) is Annotated:
        for m in annotation.__metadata__:
            out.extend(m.metadata if isinstance(m, FieldInfo) else [m])
    return out


def _without_none(annotation: Any) -> Any:
    """`T | None` as `T` (keeping an outer `Annotated`'s description)."""
    meta: tuple[Any, ...] = ()
    if typing.get_origin(annotation) is Annotated:
        annotation, meta = typing.get_args(annotation)[0], annotation.__metadata__
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        annotation = args[0]
    return Annotated[(annotation, *meta)] if meta else annotation


def _type_name(annotation: Any) -> str:
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation is Any or annotation is EMPTY:
        return "any"
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin is not None:
        name = getattr(origin, "__name__", str(origin))
        return f"{name}[{', '.join(_type_name(a) for a in args)}]" if args else name
    if annotation is type(None):
        return "None"
    return getattr(annotation, "__name__", str(annotation))


def _params(fn: Callable[..., Any], docs: dict[str, str]) -> tuple[list[EnvOption], bool, Any]:
    """The keyword parameters of `fn` as options, whether it takes `**kwargs`, and its return annotation."""
    try:
        hints = typing.get_type_hints(fn, include_extras=True)
    except Exception:  # an annotation that does not resolve: fall back to the raw ones
        hints = {}
    _, own_docs = parse_docstring(fn.__doc__)
    docs = {**docs, **own_docs}
    out: list[EnvOption] = []
    var_kw = False
    params = list(inspect.signature(fn).parameters.values())
    for p in params:
        if p.kind is p.VAR_KEYWORD:
            var_kw = True
        elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self":
            ann = hints.get(p.name, Any if p.annotation is EMPTY else p.annotation)
            ann = describe_annotation(ann, docs.get(p.name))
            desc = next((m.description for m in (ann.__metadata__ if typing.get_origin(ann) is Annotated else ())
                         if isinstance(m, FieldInfo) and m.description), "") or ""
            out.append(EnvOption(p.name, ann, p.default, desc))
    return out, var_kw, hints.get("return")


def declared_options(factory: Callable[..., Any]) -> dict[str, EnvOption] | None:
    """The options `factory` (an env class or a `load_environment` function) declares, or None if undeclared.

    The class defaults shown for `StatefulToolEnv`'s `None`-means-class-default options (`max_turns`, ...) are the
    env class's own values."""
    opts: dict[str, EnvOption] = {}
    cls: Any = factory if inspect.isclass(factory) else None
    if cls is None:
        found, var_kw, ret = _params(factory, {})
        opts.update({o.name: o for o in found})
        if not var_kw:
            return opts
        if not inspect.isclass(ret):
            return None
        cls = ret
    class_docs = parse_docstring(cls.__doc__)[1]
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        if klass is object:
            return None
        found, var_kw, _ = _params(init, class_docs | parse_docstring(klass.__doc__)[1])
        for o in found:
            if o.name not in opts:
                if o.default is None and o.name in getattr(init, "_toolgym_class_defaults", ()):
                    o = EnvOption(o.name, _without_none(o.annotation), getattr(cls, o.name, None), o.description)
                opts[o.name] = o
        if not var_kw:
            return opts
    return None


def class_defaults(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate an `__init__` whose `None` defaults for `names` mean "the class attribute of the same name": a value
    given (not None) is set on the instance before the body runs, and the declared default of each is the env
    class's value (what `toolgym envs` shows). The option is then spelled twice: the class attribute and the
    parameter."""

    def mark(fn: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(fn)

        @functools.wraps(fn)
        def init(self: Any, *args: Any, **kwargs: Any) -> Any:
            given = sig.bind_partial(self, *args, **kwargs).arguments
            for name in names:
                if given.get(name) is not None:
                    setattr(self, name, given[name])
            return fn(self, *args, **kwargs)

        init._toolgym_class_defaults = names  # type: ignore[attr-defined]
        return init

    return mark


def _candidates(raw: str) -> list[Any]:
    out: list[Any] = []
    try:
        out.append(json.loads(raw))
    except (json.JSONDecodeError, ValueError):
        pass
    out.append(raw)
    if "," in raw:
        out.append([s.strip() for s in raw.split(",")])
    return out


def _adapter(opt: EnvOption) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(opt.annotation, config=pydantic.ConfigDict(arbitrary_types_allowed=True))


def _admits_bool(annotation: Any) -> bool:
    """Whether a value of type `annotation` may be a boolean (`bool`, `Any`, a Literal of one, a union with one)."""
    if typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    if annotation in (bool, Any, object, EMPTY):
        return True
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Literal:
        return any(isinstance(a, bool) for a in args)
    if origin in (typing.Union, types.UnionType):
        return any(_admits_bool(a) for a in args)
    return False


def _first_error(exc: pydantic.ValidationError) -> str:
    e = exc.errors()[0]
    return e["msg"]


def check_options(factory: Callable[..., Any], values: Mapping[str, Any], env: str = "env",
                  from_text: bool = False) -> dict[str, Any]:
    """`values` checked against `factory`'s declared options and converted to their types (only the keys given;
    defaults stay the factory's). `from_text`: the values are command-line strings, parsed by the declared type.
    Undeclared factories get `values` back unchanged (text values JSON-parsed where they parse)."""
    opts = declared_options(factory)
    if opts is None:
        return {k: (_candidates(v)[0] if from_text and isinstance(v, str) else v) for k, v in values.items()}
    check_known(values, opts, env, f"see `toolgym envs {env}`", EnvOptionError)
    out: dict[str, Any] = {}
    for k, v in values.items():
        opt = opts[k]
        if opt.annotation is Any:
            out[k] = _candidates(v)[0] if from_text and isinstance(v, str) else v
            continue
        adapter = _adapter(opt)
        tries = _candidates(v) if from_text and isinstance(v, str) else [v]
        first: pydantic.ValidationError | str | None = None
        for cand in tries:
            if isinstance(cand, bool) and not _admits_bool(opt.annotation):  # `true` is not 1
                first = first or "a boolean is not a number"
                continue
            try:
                out[k] = adapter.validate_python(cand)
                break
            except pydantic.ValidationError as exc:
                first = first or exc
        else:
            assert first is not None
            rule = f", {opt.range}" if opt.range else ""
            why = first if isinstance(first, str) else _first_error(first)
            raise EnvOptionError(f"{env}: option {k}={v!r}: {why} ({opt.type_name}{rule})")
    missing = [o.name for o in opts.values() if o.required and o.name not in out]
    if missing:
        raise EnvOptionError(f"{env}: missing required option(s) {', '.join(missing)}")
    return out


def check_known(names: Iterable[str], valid: Iterable[str], owner: str, see: str = "",
                error: type[OptionError] = OptionError) -> None:
    """Raise `error` for the first of `names` that is not `valid`: "OWNER: unknown option 'x'; did you mean 'y'?
    Valid options: ... (SEE)" (the closest valid name when one is close enough). Env options and policy options
    (`toolgym.policies.base.check_policy_options`) both report through here."""
    valid = sorted(valid)
    unknown = [k for k in names if k not in valid]
    if unknown:
        k = unknown[0]
        close = difflib.get_close_matches(k, valid, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        raise error(f"{owner}: unknown option {k!r}{hint} Valid options: {', '.join(valid)}"
                    + (f" ({see})" if see else ""))


def parse_pairs(pairs: list[str] | None) -> dict[str, str]:
    """`key=value` strings as a dict of raw text values (typed later by `check_options(..., from_text=True)`)."""
    out: dict[str, str] = {}
    for p in pairs or []:
        if "=" not in p:
            raise EnvOptionError(f"expected key=value, got {p!r}")
        k, v = p.split("=", 1)
        out[k.strip()] = v
    return out


__all__ = ["EnvOption", "EnvOptionError", "OptionError", "check_known", "check_options", "class_defaults",
           "declared_options", "parse_pairs"]
