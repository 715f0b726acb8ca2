"""A fold pass file from an open pull request (or a fork), loaded as a class against the installed executorch.

executorch PR #21234's pass file imports a helper it adds to the Arm pass utilities (``is_carried_quant_state``),
which the installed release lacks: imported as it is, the file fails. This door loads such a file without changing
the installed package. The file runs with an ``__import__`` of its own: each ``from <executorch module> import a,
b`` is answered by the installed module, except that a name the installed module lacks is taken from the file of
the same name beside the pass file (the PR's ``arm_pass_utils.py``), and only that name and the top-level
definitions it needs. Those are run in a copy of the installed module's namespace: a shim module that exists
for the pass file alone. ``sys.modules`` keeps every installed module as it is; the pass file itself is registered
under a private name (as ``_targets/load.py`` registers a user's file) so that its source can be read back.

The pull request's files are not part of this project: a user fetches them from the PR's head commit
(``scripts/check_pr_21234.py`` prints how, and checks them) and names the pass file. The project's tests load a
pass file of its own written in the same shape (``tests/data/pr_shaped/``).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

from .._base.errors import InspectorError, describe, listing, quoted
from . import executorch as _executorch

PASS_CLASS = "FoldScalarMulIntoConvPass"  # the class a pass file defines, unless told another
_PACKAGE = "executorch"  # the package whose modules a pass file's helpers may be missing from


@dataclass(frozen=True, kw_only=True)
class Borrowed:
    """A name the pass file imports that the installed module lacks, taken from a helper file."""

    module: str  # the module the pass file imports it from, as it names it
    name: str  # the name it imports
    helper: str  # the file its definition was taken from


@dataclass(frozen=True, kw_only=True)
class LoadedPassFile:
    """A pass file loaded against the installed executorch: its class, its namespace, what it borrowed."""

    path: str  # the pass file, resolved
    pass_class: type  # the pass class it defines
    namespace: MappingProxyType = field(repr=False)  # the pass file's globals, read-only (its helpers, as it calls them)
    borrowed: tuple[Borrowed, ...]  # each name taken from a helper file, in import order
    digest: str  # sha256 of the pass file's bytes and those of every helper file it borrowed from

    def function(self, name: str) -> Callable:
        """The callable ``name`` as the pass file sees it (a helper it imports, from the installed module or
        borrowed); one line if it has none."""
        found = self.namespace.get(name)
        if not callable(found):
            raise InspectorError(f"the pass file {Path(self.path).name} has no function {quoted(name)}")
        return found


def load_pass_file(path: str | Path, *, class_name: str = PASS_CLASS,
                   helpers: Iterable[str | Path] = ()) -> LoadedPassFile:
    """Load the pass file ``path`` (code the user chose to run) against the installed executorch.

    Args:
        path: the pass file (``fold_scalar_mul_into_conv_pass.py`` of a pull request, as the user fetched it).
        class_name: the pass class it defines (default ``FoldScalarMulIntoConvPass``).
        helpers: files that define the names the pass file imports and the installed executorch lacks, each named
            like the module it stands in for (``arm_pass_utils.py``); default: such files beside the pass file.

    A name missing from both the installed module and its helper file, a file that does not parse, or a pass file
    that raises while it is run, is one line.
    """
    _executorch.fold_pass_class()  # the installed executorch is one the inspector supports, or one line
    source_path = _python_file(path, "pass file")
    tree = _parsed(source_path)
    given = {p.stem: p for p in (_python_file(h, "helper file") for h in helpers)}
    shims: dict[str, ModuleType] = {}
    borrowed: list[Borrowed] = []
    read = {source_path}
    for module, names in _executorch_imports(tree):
        installed = _installed(module)
        missing = [n for n in names if installed is None or not hasattr(installed, n)]
        if not missing:
            continue
        stem = module.rpartition(".")[2]
        helper = given.get(stem) or source_path.with_name(f"{stem}.py")
        if not helper.is_file() or helper == source_path:
            raise InspectorError(
                f"{source_path.name} imports {listing(missing)} from {module}, which executorch "
                f"{_executorch.installed_version()} lacks; put the pull request's {stem}.py beside it")
        shims[module] = _shim(module, installed, helper, missing)
        borrowed += [Borrowed(module=module, name=n, helper=str(helper)) for n in missing]
        read.add(helper)
    pass_module = _run(source_path, tree, shims)
    cls = getattr(pass_module, class_name, None)
    if not (isinstance(cls, type) and callable(getattr(cls, "call", None))):
        found = sorted(n for n, v in vars(pass_module).items()
                       if isinstance(v, type) and v.__module__ == pass_module.__name__ and hasattr(v, "call"))
        raise InspectorError(f"{source_path.name} has no pass class {quoted(class_name)}; found: "
                             f"{listing(found) or 'none'}")
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(read))).hexdigest()
    return LoadedPassFile(path=str(source_path), pass_class=cls, namespace=MappingProxyType(vars(pass_module)),
                          borrowed=tuple(borrowed), digest=digest)


# ---------------------------------------------------------------- the pieces


def _python_file(path: str | Path, what: str) -> Path:
    p = Path(path)
    if not p.is_file():
        raise InspectorError(f"no such {what}: {path}")
    if p.suffix != ".py":
        raise InspectorError(f"a {what} is a .py file, got {p.name}")
    return p.resolve()


def _parsed(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(), str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as exc:
        raise InspectorError(f"{path.name} is not Python that parses: {describe(exc)}") from exc


def _executorch_imports(tree: ast.Module) -> list[tuple[str, tuple[str, ...]]]:
    """(module, names) of every ``from executorch... import names`` of the file, in file order."""
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] == _PACKAGE:
            names = out.setdefault(node.module, [])
            names += [a.name for a in node.names if a.name != "*" and a.name not in names]
    return [(m, tuple(n)) for m, n in out.items()]


def _installed(module: str) -> ModuleType | None:
    """The installed module (None when the installed release has no such module)."""
    try:
        return _executorch._import(module)
    except InspectorError:
        return None


def _shim(module: str, installed: ModuleType | None, helper: Path, missing: list[str]) -> ModuleType:
    """``module`` as the pass file sees it: the installed module's namespace, with the definitions of ``missing``
    (and the top-level names they use that the installed module lacks) run from ``helper``."""
    tree = _parsed(helper)
    defined = _top_level_definitions(tree)
    absent = [n for n in missing if n not in defined]
    if absent:
        raise InspectorError(f"{helper.name} does not define {listing(absent)}, which the pass file imports from "
                             f"{module} and executorch {_executorch.installed_version()} lacks")
    have = set(vars(builtins)) | (set(vars(installed)) if installed is not None else set())
    chosen: set[int] = set()
    todo = list(missing)
    while todo:
        name = todo.pop()
        index = defined.get(name)
        if index is None or index in chosen or (name in have and name not in missing):
            continue
        chosen.add(index)
        todo += [n.id for n in ast.walk(tree.body[index]) if isinstance(n, ast.Name)]
    shim = ModuleType(module, f"{module} as the pass file sees it: the installed module and {helper.name}'s "
                              f"{listing(sorted(missing))}")
    namespace = vars(shim)
    if installed is not None:
        namespace.update({k: v for k, v in vars(installed).items() if k not in ("__doc__", "__spec__", "__loader__")})
    namespace["__name__"] = module
    code = compile(ast.Module(body=[tree.body[i] for i in sorted(chosen)], type_ignores=[]), str(helper), "exec")
    try:
        exec(code, namespace)  # noqa: S102 - the helper's own definitions: code the user chose to run
    except Exception as exc:  # one line naming the helper file
        raise InspectorError(f"running {helper.name}'s definitions of {listing(sorted(missing))} failed: "
                             f"{describe(exc)}") from exc
    return shim


def _top_level_definitions(tree: ast.Module) -> dict[str, int]:
    """name -> index of the top-level statement that defines it last (a def, a class, an assignment, an import)."""
    out: dict[str, int] = {}
    for i, node in enumerate(tree.body):
        names: list[str] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, ast.Assign):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names = [node.target.id]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [(a.asname or a.name).split(".")[0] for a in node.names if a.name != "*"]
        out.update((n, i) for n in names)
    return out


def _run(path: Path, tree: ast.Module, shims: dict[str, ModuleType]) -> ModuleType:
    """Run the pass file in a module of its own whose ``from M import ...`` of a shimmed module gets the shim."""
    real_import = builtins.__import__

    def pass_file_import(name, globals=None, locals=None, fromlist=(), level=0):
        if level == 0 and fromlist and name in shims:
            return shims[name]
        return real_import(name, globals, locals, fromlist, level)

    name = "_fold_inspector_pr_pass_" + hashlib.sha1(str(path).encode()).hexdigest()[:12]
    module = ModuleType(name)
    module.__file__ = str(path)
    module.__dict__["__builtins__"] = {**vars(builtins), "__import__": pass_file_import}
    sys.modules[name] = module  # inspect.getsource and dataclasses look the module up by name
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)  # noqa: S102 - a file the user chose to run
    except Exception as exc:  # one line naming the file
        sys.modules.pop(name, None)
        raise InspectorError(f"running {path.name} failed: {describe(exc)}") from exc
    return module


def pass_file_namespace(pass_class: type) -> dict[str, Any]:
    """The globals the methods of ``pass_class`` (a class a pass file defines) run with."""
    return pass_class.call.__globals__
