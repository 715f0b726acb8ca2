"""One codec for every record: its dict form from its dataclass fields, and back with every field checked.

``to_dict(record)`` writes each field under its name (floats JSON can hold, tuples as lists, a tuple of
``(name, value)`` pairs as an object, a nested record as its own dict, an enum as its value, a registered type as
its name); ``from_dict(cls, data)`` reads that back, checking each field against its type hint with the readers of
``data.py`` and naming the field that is wrong. A record says what differs in its format once, never in a
hand-written method:

- per field, ``field(metadata=codec(key=..., old=..., write=..., read=..., value=..., kept=..., omit=...))``: a
  JSON key other than the field's name, the keys older formats used (format 1 said "policy"), its own encoding,
  what is written when it is not the field's value (a digest of outputs not kept), a field that is not written
  (raw tensors), a field written only when it is not its default;
- per class, ``json_kind`` (a document says what it is: ``"kind": "advice"``, checked first on reading),
  ``json_format`` (the document carries the format number under ``json_format_key``, "format" unless a session
  says "version": written, and checked on reading), ``json_upgrade`` (a function bringing a dict of an older
  format up to this one, where a missing key's value follows from the others), ``json_derived`` (keys computed
  from the fields for readers: written, accepted on reading, and, for the keys in ``json_checked``, checked
  against the record read) and ``json_order`` (the order of the keys, where the format's differs from the
  fields');
- per type, ``register(cls, write, read)`` where the type is defined: a rule, an engine, an accelerator is written
  by its name and read back as the registered one.

A field missing from a dict reads as its default (a file written before the field existed); a field without a
default that is missing, a key no field has, or a value of the wrong kind is refused (KeyError, ValueError or
TypeError, one line naming the record and the field). Format 1 to ``FORMAT`` read; a newer one is refused in one
line (``check_format``).
"""

from __future__ import annotations

import dataclasses
import enum
import pathlib
import sys
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar

from .errors import InspectorError
from .data import FORMAT, check_format, json_float, jsonable, read_float, read_int, read_list, read_str

_META = "codec"  # the key of a field's metadata this module reads


@dataclasses.dataclass(frozen=True, kw_only=True)
class FieldCodec:
    """How one field is written and read, where it is not what its name and type say."""

    key: str | None = None  # the JSON key (None: the field's name)
    old: tuple[str, ...] = ()  # the keys older formats wrote it under, read when ``key`` is absent
    write: Callable[[Any], Any] | None = None  # value -> JSON-ready value (None: by its type)
    read: Callable[[Any], Any] | None = None  # JSON value -> value, raising TypeError/ValueError (None: by its hint)
    value: Callable[[Any], Any] | None = None  # record -> what is written (None: the field's value)
    kept: bool = True  # False: never written nor read (a read record has the field's default)
    omit: bool = False  # True: not written while it equals its default (the format had no key for it then)


def codec(*, key: str | None = None, old: tuple[str, ...] | str = (), write: Callable | None = None,
          read: Callable | None = None, value: Callable | None = None, kept: bool = True, omit: bool = False) -> dict:
    """A field's metadata saying how it differs in the dict form: ``field(metadata=codec(key="id"))``."""
    return {_META: FieldCodec(key=key, old=(old,) if isinstance(old, str) else tuple(old), write=write, read=read,
                              value=value, kept=kept, omit=omit)}


def as_objects(*names: str, read: Callable[[Any], Any] | tuple = read_str) -> dict:
    """A field's metadata for a tuple of fixed-length tuples written as objects with these keys (a format that
    wrote ``[{"phase": ..., "name": ...}]`` for ``(phase, name)`` pairs); each value is read with ``read`` (one
    reader, or one per key)."""
    readers = read if isinstance(read, tuple) else (read,) * len(names)

    def row(x):
        if not isinstance(x, dict) or set(x) != set(names):
            raise ValueError(f"expected an object with the keys {', '.join(names)}")
        return tuple(r(x[n]) for r, n in zip(readers, names))

    return codec(write=lambda v: [{n: jsonable(x) for n, x in zip(names, t)} for t in v],
                 read=lambda v: tuple(row(x) for x in read_list(v)))


# Types written by a name and read back by looking the name up (a rule, an engine, an accelerator): registered once
# where the type is defined, then every field of that type is coded the same way.
_TYPES: dict[type, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {}


def register(cls: type, write: Callable[[Any], Any], read: Callable[[Any], Any]) -> None:
    """Code every field of type ``cls`` with ``write`` (value -> JSON-ready) and ``read`` (JSON -> value)."""
    _TYPES[cls] = (write, read)


def _registered(cls: Any):
    if isinstance(cls, type):
        for base in cls.__mro__:
            if base in _TYPES:
                return _TYPES[base]
    return None


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Field:
    name: str
    key: str
    hint: Any
    how: FieldCodec
    has_default: bool
    default: Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Spec:
    fields: tuple[_Field, ...]
    format: str | None  # what the document is called in the error for a newer format (None: no format key)
    kind: str | None  # the document's "kind" (None: it has none)
    format_key: str  # the key of the format number
    upgrade: Any  # dict -> dict of this format (None: every older dict reads as it is)
    derived: dict
    checked: frozenset
    order: tuple[str, ...]
    keys: frozenset  # every key a dict of this record may hold


_PLAIN = FieldCodec()


def _spec(cls: type) -> _Spec:
    """How ``cls`` is coded, worked out once and kept on the class itself (one per record type, freed with it)."""
    found = cls.__dict__.get("_codec_spec")
    if found is None:
        found = _make_spec(cls)
        type.__setattr__(cls, "_codec_spec", found)
    return found


def _make_spec(cls: type) -> _Spec:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} is not a dataclass record")
    out = []
    for f in dataclasses.fields(cls):
        how = f.metadata.get(_META, _PLAIN)
        has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        if not f.init:
            continue
        out.append(_Field(name=f.name, key=how.key or f.name, hint=_hint(cls, f), how=how, has_default=has_default,
                          default=default))
    fmt, kind, fkey = (getattr(cls, "json_format", None), getattr(cls, "json_kind", None),
                       getattr(cls, "json_format_key", "format"))
    derived = dict(getattr(cls, "json_derived", {}) or {})
    keys = ({"kind"} if kind else set()) | {x.key for x in out} | {k for x in out for k in x.how.old} | set(derived)
    return _Spec(fields=tuple(out), format=fmt, kind=kind, format_key=fkey, upgrade=getattr(cls, "json_upgrade", None),
                 derived=derived, checked=frozenset(getattr(cls, "json_checked", ()) or ()),
                 order=tuple(getattr(cls, "json_order", ()) or ()), keys=frozenset(keys | ({fkey} if fmt else set())))


def _hint(cls: type, f: dataclasses.Field) -> Any:
    """A field's type as an object (annotations are strings under ``from __future__ import annotations``)."""
    hint = f.type
    if isinstance(hint, str):
        try:
            hint = eval(hint, vars(sys.modules[cls.__module__]), dict(vars(cls)))  # noqa: S307 - the class's own source
        except Exception:  # noqa: BLE001 - a name only imported for type checkers: read the value as it is
            return Any
    return hint


def to_dict(record: Any) -> dict:
    """``record``'s dict form, JSON-ready: its fields by the codec's rules (module docstring)."""
    spec = _spec(type(record))
    out: dict = {"kind": spec.kind} if spec.kind else {}
    if spec.format:
        out[spec.format_key] = FORMAT
    for f in spec.fields:
        if not f.how.kept:
            continue
        value = getattr(record, f.name) if f.how.value is None else f.how.value(record)
        if f.how.omit and f.has_default and value == f.default:
            continue
        out[f.key] = f.how.write(value) if f.how.write is not None else _write(value, f.hint)
    for key, compute in spec.derived.items():
        out[key] = jsonable(compute(record))
    if spec.order:
        out = {**{k: out[k] for k in spec.order if k in out}, **{k: v for k, v in out.items() if k not in spec.order}}
    return out


def from_dict(cls: type, data: Any) -> Any:
    """A ``cls`` from its dict form, every field checked against its type (module docstring for what is refused)."""
    spec = _spec(cls)
    if not isinstance(data, dict):
        raise TypeError(f"expected an object for a {cls.__name__}, got {type(data).__name__}")
    if spec.kind and data.get("kind") != spec.kind:
        raise InspectorError(f"not {'an' if spec.kind[0] in 'aeiou' else 'a'} {spec.kind} (kind {data.get('kind')!r}): "
                             f"give what {cls.__name__}.to_dict() wrote")
    if spec.format:
        check_format({"format": data.get(spec.format_key, 1)}, spec.format)
    if spec.upgrade is not None:
        data = spec.upgrade(data)
    kwargs = {}
    for f in spec.fields:
        if not f.how.kept:
            continue
        key = next((k for k in (f.key, *f.how.old) if k in data), None)
        if key is None:
            if f.has_default:
                continue  # written before the field existed: its default
            raise KeyError(f.key)
        try:
            kwargs[f.name] = f.how.read(data[key]) if f.how.read is not None else _read(data[key], f.hint)
        except (TypeError, ValueError) as exc:
            raise (TypeError if isinstance(exc, TypeError) else ValueError)(f"{cls.__name__}.{key}: {exc}") from exc
    unknown = [k for k in data if k not in spec.keys]  # after the fields: a dict of something else lacks one
    if unknown:
        raise ValueError(f"not the fields of a {cls.__name__}: unknown key {unknown[0]!r}")
    record = cls(**kwargs)
    for key in spec.checked:
        if key not in data or jsonable(spec.derived[key](record)) != data[key]:
            raise ValueError(f"the {key} of this {cls.__name__} does not follow from its fields")
    return record


class Record:
    """A mixin giving a dataclass record ``to_dict()`` and ``from_dict(d)`` through this codec."""

    __slots__ = ()

    # the class-level parts of the format (module docstring); a record sets the ones it needs
    json_kind: ClassVar[str | None] = None
    json_format: ClassVar[str | None] = None
    json_format_key: ClassVar[str] = "format"
    json_upgrade: ClassVar[Callable[[dict], dict] | None] = None
    json_derived: ClassVar[dict] = {}
    json_checked: ClassVar[tuple[str, ...]] = ()
    json_order: ClassVar[tuple[str, ...]] = ()

    def to_dict(self) -> dict:
        """This record as a JSON-ready dict (its fields, by ``inspector._base.codec``)."""
        return to_dict(self)

    @classmethod
    def from_dict(cls, d: dict):
        """Read ``to_dict()`` back, checking every field (TypeError, ValueError or KeyError naming the bad one)."""
        return from_dict(cls, d)


# -- by type ---------------------------------------------------------------------------------------------------------


def _pairs_of(hint: Any):
    """The value type of ``tuple[tuple[str, X], ...]`` (a tuple of pairs, written as an object), or None."""
    if typing.get_origin(hint) is not tuple:
        return None
    args = typing.get_args(hint)
    if len(args) != 2 or args[1] is not Ellipsis or typing.get_origin(args[0]) is not tuple:
        return None
    inner = typing.get_args(args[0])
    return inner[1] if len(inner) == 2 and inner[0] is str else None


def _optional(hint: Any) -> tuple[bool, tuple]:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        return type(None) in args, tuple(a for a in args if a is not type(None))
    return False, (hint,)


def _write(value: Any, hint: Any = Any) -> Any:
    if value is None:
        return None
    coded = _registered(type(value))
    if coded is not None:
        return coded[0](value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return value.to_dict() if hasattr(value, "to_dict") else to_dict(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, pathlib.PurePath):
        return str(value)
    if isinstance(value, float):
        return json_float(value)
    _, hints = _optional(hint)
    hint = hints[0] if len(hints) == 1 else Any
    if isinstance(value, (tuple, list)):
        pair = _pairs_of(hint)
        if pair is not None:
            return {k: _write(v, pair) for k, v in value}
        args = typing.get_args(hint) if typing.get_origin(hint) in (tuple, list) else ()
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:
            return [_write(v, args[0]) for v in value]
        if len(args) == len(value):
            return [_write(v, a) for v, a in zip(value, args)]
        return [_write(v) for v in value]
    if isinstance(value, dict):
        args = typing.get_args(hint) if typing.get_origin(hint) is dict else ()
        return {k: _write(v, args[1] if args else Any) for k, v in value.items()}
    return value


def _read(v: Any, hint: Any) -> Any:
    if hint is Any or hint is object:
        return v
    nullable, hints = _optional(hint)
    if v is None and nullable:
        return None
    if len(hints) > 1:  # a union of several: the first that reads it
        for h in hints:
            try:
                return _read(v, h)
            except (TypeError, ValueError, KeyError):
                continue
        raise TypeError(f"expected one of {', '.join(getattr(h, '__name__', str(h)) for h in hints)}")
    hint = hints[0]
    coded = _registered(hint)
    if coded is not None:
        return coded[1](v)
    if hint is bool:
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {type(v).__name__}")
        return v
    if hint is int:
        return read_int(v)
    if hint is float:
        return read_float(v)
    if hint is str:
        return read_str(v)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return hint.from_dict(v) if hasattr(hint, "from_dict") else from_dict(hint, v)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint(v)
    if isinstance(hint, type) and issubclass(hint, pathlib.PurePath):
        return hint(read_str(v))
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is tuple or origin is tuple:
        pair = _pairs_of(hint)
        if pair is not None:
            if not isinstance(v, dict):
                raise TypeError(f"expected an object, got {type(v).__name__}")
            return tuple((read_str(k), _read(x, pair)) for k, x in v.items())
        items = read_list(v)
        if not args:
            return tuple(items)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_read(x, args[0]) for x in items)
        if len(items) != len(args):
            raise ValueError(f"expected {len(args)} items, got {len(items)}")
        return tuple(_read(x, a) for x, a in zip(items, args))
    if hint is list or origin is list:
        return [_read(x, args[0]) if args else x for x in read_list(v)]
    if hint is dict or origin is dict:
        if not isinstance(v, dict):
            raise TypeError(f"expected an object, got {type(v).__name__}")
        return {read_str(k): _read(x, args[1]) if args else x for k, x in v.items()}
    return v


__all__ = ["FieldCodec", "Record", "as_objects", "codec", "from_dict", "register", "to_dict"]
