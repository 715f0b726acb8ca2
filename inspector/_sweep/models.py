"""The models of a sweep: ``ModelSpec``, TOML model lists, ``models_from``."""

from __future__ import annotations

import inspect
from importlib.metadata import version
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Sequence

from .._base.hashing import digest
from .._base.limits import check_steps
from .._base.errors import InspectorError, first_line, listing, quoted
from .store import FORMAT_VERSION
from .._targets.samples import samples
from .._targets.samples import samples as sample_registry
from .._base.limits import check_shape
from .._base.version import __version__
import torch

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser as the tomli backport (a dependency there)
    import tomli as tomllib


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """One model of a sweep, as the user named it."""

    target: str  # what the loader takes: "sample:NAME", "/abs/model.pt2", "/abs/net.py:Net"
    label: str  # how tables show it (as written: relative paths stay relative)
    input_shapes: tuple[tuple[int, ...], ...] | None = None  # seeded random inputs of these shapes
    steps: int | None = None  # this model's steps when the sweep compares (None: the sweep's; 0: never)

    def content_key(self) -> str:
        """What the model's results depend on before it is even loaded: the target, the bytes of its
        file (a sample: its package's sources), the input shapes and the stack's versions. A second
        sweep finds its results in the store by this key without loading anything, while the files the
        model was built from (its record's ``sources``: the helpers its file imports) are unchanged."""

        return digest(FORMAT_VERSION, self.target, _content_of(self.target), self.input_shapes,
                      torch.__version__, version("executorch"), version("tosa-tools"), __version__)

    # Written by hand: a spec is written as the user wrote it (its label under "target"), not as resolved.
    def to_dict(self) -> dict:
        return {"target": self.label, "input_shapes": [list(s) for s in self.input_shapes or ()] or None,
                "steps": self.steps}


def _content_of(target: str) -> str:
    """A digest of the bytes a target is built from (edited files give another key)."""

    if target.startswith("sample:"):
        try:
            entry = samples.entry(target.removeprefix("sample:"))
        except InspectorError:
            return "unknown sample"  # its task says so, in one line
        try:
            folder = Path(inspect.getsourcefile(entry.factory)).parent
            files = sorted(folder.rglob("*.py"))
        except (TypeError, OSError):
            return f"sample without source: {target}"
        return digest(*[(str(f.relative_to(folder)), f.read_bytes()) for f in files])
    file = target.rpartition(":")[0] if ".py:" in target else target
    try:
        return digest(Path(file).read_bytes())
    except OSError:
        return "missing"  # the model's own task reports it, in one line


def models_from(models: Iterable[Any] = (), *, samples: bool = False,
                input_shapes: Sequence[Sequence[int]] | None = None, exclude: Iterable[str] = ()) -> list[ModelSpec]:
    """The models a sweep runs: ``sample:NAME``, ``path/to/file.py:Class``, ``model.pt2``, a TOML file
    listing models (``[[model]]`` tables), ``ModelSpec`` records; ``samples`` adds every built-in sample.
    ``input_shapes`` applies to the targets given here (not to those in TOML files, which say their own).
    ``exclude`` drops models by label or sample name (``--samples --exclude generated_blocks``)."""

    shapes = _shapes(input_shapes, "input shape") if input_shapes else None
    out: list[ModelSpec] = []
    if isinstance(models, (str, os.PathLike, ModelSpec)):
        models = [models]
    for item in models:
        if isinstance(item, ModelSpec):
            out.append(item)
        elif isinstance(item, (str, os.PathLike)):
            text = os.fspath(item)
            if text.endswith(".toml"):
                out += read_models_toml(text)
            else:
                out.append(_spec(text, text, shapes, None, Path.cwd()))
        else:
            raise InspectorError(f"cannot sweep a {type(item).__name__}; give sample:NAME, path/to/file.py:Class, "
                                 "a .pt2 file or a .toml list (for a model object: torch.export.save it first)")
    if samples:
        out += [ModelSpec(target=f"sample:{name}", label=f"sample:{name}") for name in sample_registry.names()]
    excluded = {e.removeprefix("sample:") for e in ([exclude] if isinstance(exclude, str) else exclude)}
    if excluded:
        known = {spec.label for spec in out} | {spec.target.removeprefix("sample:") for spec in out}
        unknown = sorted(e for e in excluded if e not in known and f"sample:{e}" not in known)
        if unknown:
            raise InspectorError(f"cannot exclude {quoted(unknown[0])}: no model of the sweep is called that")
        out = [spec for spec in out if spec.label.removeprefix("sample:") not in excluded
               and spec.target.removeprefix("sample:") not in excluded]
    if not out:
        raise InspectorError("no models to sweep; give targets, a --models FILE.toml, or --samples")
    seen: dict[str, int] = {}
    unique = []
    for spec in out:  # the same label twice (two TOML files, relative names): keep both, tell them apart
        seen[spec.label] = seen.get(spec.label, 0) + 1
        unique.append(spec if seen[spec.label] == 1 else replace(spec, label=f"{spec.label}#{seen[spec.label]}"))
    return unique


_TOML_KEYS = {"target", "input_shape", "input_shapes", "steps", "name"}


def read_models_toml(path: str | os.PathLike) -> list[ModelSpec]:
    """The ``[[model]]`` tables of a TOML file; relative paths are relative to the file."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InspectorError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InspectorError(f"cannot read {path}: {first_line(exc)}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InspectorError(f"{path.name} is not valid TOML: {first_line(exc)}") from None
    tables = data.get("model")
    if not isinstance(tables, list) or not tables or not all(isinstance(t, dict) for t in tables):
        raise InspectorError(f"{path.name} lists no models; write one [[model]] table per model with target = \"...\"")
    unknown = sorted({k for t in tables for k in t} - _TOML_KEYS) + sorted(set(data) - {"model"})
    if unknown:
        raise InspectorError(f"{path.name}: unknown key {quoted(unknown[0])}; a [[model]] table takes "
                             f"{listing(sorted(_TOML_KEYS))}")
    out = []
    for i, table in enumerate(tables, 1):
        where = f"{path.name}, model {i}"
        target = table.get("target")
        if not isinstance(target, str) or not target.strip():
            raise InspectorError(f"{where}: target must be a string such as \"sample:NAME\" or \"net.py:Net\"")
        shapes = None
        if "input_shape" in table and "input_shapes" in table:
            raise InspectorError(f"{where}: give input_shape or input_shapes, not both")
        if "input_shape" in table:
            shapes = _shapes([table["input_shape"]], f"{where}: input_shape")
        elif "input_shapes" in table:
            shapes = _shapes(table["input_shapes"], f"{where}: input_shapes")
        steps = table.get("steps")
        if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
            raise InspectorError(f"{where}: steps must be a whole number (0: never compare this model), "
                                 f"got {quoted(steps)}")
        if steps:  # 0: never compare this model (its decisions only)
            check_steps(steps, f"{where}: steps")
        name = table.get("name")
        if name is not None and not isinstance(name, str):
            raise InspectorError(f"{where}: name must be a string")
        out.append(_spec(target, name or target, shapes, steps, path.parent))
    return out


def _spec(target: str, label: str, shapes, steps, root: Path) -> ModelSpec:
    if target.startswith("sample:"):
        return ModelSpec(target=target, label=label, input_shapes=shapes, steps=steps)
    if ".py:" in target:
        file, _, cls = target.rpartition(":")
        return ModelSpec(target=f"{(root / file).resolve()}:{cls}", label=label, input_shapes=shapes, steps=steps)
    if target.endswith(".pt2"):
        return ModelSpec(target=str((root / target).resolve()), label=label, input_shapes=shapes, steps=steps)

    if target in samples.names():
        return ModelSpec(target=f"sample:{target}", label=label, input_shapes=shapes, steps=steps)
    raise InspectorError(f"cannot tell what {quoted(target)} is; give sample:NAME, path/to/file.py:Class or a .pt2 file")


def _shapes(shapes, what: str) -> tuple[tuple[int, ...], ...]:
    try:
        out = tuple(tuple(shape) for shape in shapes)
    except TypeError:
        out = ()
    if not out or any(not s or any(isinstance(d, bool) or not isinstance(d, int) or d <= 0 for d in s) for s in out):
        raise InspectorError(f"{what} must be lists of positive integers, e.g. [1, 3, 8, 8]; got {quoted(shapes)}")

    for s in out:
        check_shape(s, what)
    return out

