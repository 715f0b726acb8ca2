"""No code of the inspector or its widgets reaches into CPython's private multiprocessing internals.

Those internals (``Popen._launch``, the fork server's ``_forkserver_pid``, ``set_spawning_popen``, the
``popen_*`` modules) change between Python releases: a pool built on them runs on the one Python it was copied
from. The check reads every ``.py`` file with ``ast`` (a comment or a docstring that names one is fine) and
follows imports and assignments, so that ``X._name`` is flagged only where ``X`` is a ``multiprocessing``
module or object (the project's own ``self._jobs`` is not), or where the name is one of the internals below
whatever holds it.
"""

from __future__ import annotations

import ast
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("inspector", "widgets")

# Names that are CPython internals wherever they appear (an attribute, a method defined, a name imported).
FORBIDDEN_NAMES = frozenset({"_launch", "_forkserver_pid", "_forkserver_address", "_forkserver_alive_fd",
                             "set_spawning_popen", "get_spawning_popen"})
PRIVATE_ROOTS = ("multiprocessing", "concurrent.futures")

# The last commit whose worker pool copied CPython 3.11's ``Popen._launch`` and read the fork server's fields.
OLD_POOL = ("ac90f576052f415818581acf40a5dcdda8b044a1", "inspector/_workers/pool.py")


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _internal(path: str) -> bool:
    return any(path == root or path.startswith(root + ".") for root in PRIVATE_ROOTS)


class _Checker(ast.NodeVisitor):
    """Collects ``(line, what)`` for each use of a private CPython internal in one module."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str]] = []
        # name (or dotted ``self.x``) -> the multiprocessing path it holds; None: it holds something else here
        self.scopes: list[dict[str, str | None]] = [{}]
        self.classes: list[bool] = []  # per enclosing class: does it derive from a multiprocessing class?

    # --------------------------------------------------------- what a name or expression holds

    def _lookup(self, name: str) -> str | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def resolve(self, node: ast.AST) -> str | None:
        """The dotted multiprocessing path an expression holds (``multiprocessing.forkserver._forkserver``),
        ``()`` marking a call's result; None when it holds nothing of multiprocessing."""
        if isinstance(node, ast.Name):
            return self._lookup(node.id)
        if isinstance(node, ast.Attribute):
            base = self.resolve(node.value)
            if base is not None:
                return f"{base}.{node.attr}"
            dotted = _dotted(node)
            return self._lookup(dotted) if dotted else None
        if isinstance(node, ast.Call):
            base = self.resolve(node.func)
            return f"{base}()" if base is not None else None
        return None

    def _flag(self, node: ast.AST, what: str) -> None:
        self.found.append((getattr(node, "lineno", 0), what))

    def _bind(self, target: ast.AST, path: str | None) -> None:
        if isinstance(target, ast.Name):
            self.scopes[-1][target.id] = path
        elif isinstance(target, ast.Attribute) and (dotted := _dotted(target)):
            self.scopes[0][dotted] = path  # self.x = ...: read in other methods too
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._bind(element, None)

    # --------------------------------------------------------- imports

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(node, alias.name)
            if _internal(alias.name):
                if alias.asname:
                    self.scopes[-1][alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    self.scopes[-1][top] = top

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level or not _internal(module):
            for alias in node.names:
                if alias.name in FORBIDDEN_NAMES:
                    self._flag(node, f"imports {alias.name}")
            return
        self._check_module(node, module)
        for alias in node.names:
            path = f"{module}.{alias.name}"
            self._check_module(node, path)
            if _is_private(alias.name) or alias.name in FORBIDDEN_NAMES:
                self._flag(node, f"imports {path}")
            self.scopes[-1][alias.asname or alias.name] = path

    def _check_module(self, node: ast.AST, path: str) -> None:
        parts = path.split(".")
        if parts[0] == "multiprocessing" and any(p.startswith("popen_") for p in parts[1:]):
            self._flag(node, f"imports {path}")
        elif _internal(path) and any(_is_private(p) for p in parts[1:]):
            self._flag(node, f"imports {path}")

    # --------------------------------------------------------- uses

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FORBIDDEN_NAMES:
            self._flag(node, f".{node.attr}")
        elif _is_private(node.attr):
            base = self.resolve(node.value)
            if base is not None:
                self._flag(node, f"{base}.{node.attr}")
            elif (self.classes and self.classes[-1] and isinstance(node.value, ast.Name)
                  and node.value.id in ("self", "cls")):
                self._flag(node, f"{node.value.id}.{node.attr} in a subclass of a multiprocessing class")
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in FORBIDDEN_NAMES:
            self._flag(node, node.id)

    def visit_Call(self, node: ast.Call) -> None:
        # getattr(forkserver, "_forkserver_pid") is the same access as forkserver._forkserver_pid
        if (isinstance(node.func, ast.Name) and node.func.id in ("getattr", "setattr", "hasattr", "delattr")
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            name = node.args[1].value
            base = self.resolve(node.args[0])
            if name in FORBIDDEN_NAMES or (_is_private(name) and base is not None):
                self._flag(node, f"{node.func.id}(..., {name!r})")
        self.generic_visit(node)

    # --------------------------------------------------------- what names hold

    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        path = self.resolve(node.value)
        for target in node.targets:
            self.visit(target)
            self._bind(target, path)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self.visit(node.value)
            self._bind(node.target, self.resolve(node.value))
        self.visit(node.target)

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self._bind(node.optional_vars, self.resolve(node.context_expr))

    # --------------------------------------------------------- scopes

    def _function(self, node) -> None:
        if node.name in FORBIDDEN_NAMES or (self.classes and self.classes[-1] and _is_private(node.name)):
            self._flag(node, f"defines {node.name}" + (" in a subclass of a multiprocessing class"
                                                       if node.name not in FORBIDDEN_NAMES else ""))
        for decorator in node.decorator_list:
            self.visit(decorator)
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                self.visit(default)
        args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]
        self.scopes.append({arg.arg: None for arg in args if arg is not None})  # a parameter shadows an outer name
        for statement in node.body:
            self.visit(statement)
        self.scopes.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        derived = any(self.resolve(base) is not None for base in node.bases)
        for base in node.bases:
            self.visit(base)
        self.classes.append(derived)
        for statement in node.body:
            self.visit(statement)
        self.classes.pop()


def _dotted(node: ast.AST) -> str | None:
    """``self.ctx`` for an attribute chain on a plain name, else None."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def private_uses(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """Every use of a private CPython multiprocessing internal in ``source``, as ``(line, what)``."""
    checker = _Checker()
    checker.visit(ast.parse(source, filename))
    return sorted(set(checker.found))


def _scanned_files() -> list[Path]:
    return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py"))


def test_no_module_uses_private_cpython_internals():
    files = _scanned_files()
    assert len(files) > 20  # the walk found the package, not an empty folder
    found = {str(p.relative_to(ROOT)): uses for p in files if (uses := private_uses(p.read_text(), str(p)))}
    assert found == {}


def test_the_check_catches_the_old_pool_that_copied_cpython_311():
    commit, path = OLD_POOL
    try:
        old = subprocess.run(["git", "show", f"{commit}:{path}"], cwd=ROOT, capture_output=True, text=True,
                             timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        pytest.skip("git is not available")
    if old.returncode != 0:
        pytest.skip(f"this checkout has no history up to {commit[:7]}")
    found = {what for _, what in private_uses(old.stdout)}
    expected = {
        "imports multiprocessing.popen_forkserver",
        "imports multiprocessing.context.set_spawning_popen",
        "defines _launch",
        "set_spawning_popen",
        "multiprocessing.forkserver._forkserver",
        "._forkserver_pid",
        "multiprocessing.forkserver._forkserver._stop",
    }
    assert expected <= found, sorted(found)


@pytest.mark.parametrize("source, what", [
    ("from multiprocessing import forkserver\nforkserver._forkserver._stop()\n",
     "multiprocessing.forkserver._forkserver"),
    ("import multiprocessing.forkserver as fs\npid = fs._forkserver._forkserver_pid\n", "._forkserver_pid"),
    ("import multiprocessing.popen_spawn_posix\n", "imports multiprocessing.popen_spawn_posix"),
    ("from multiprocessing.popen_fork import Popen\n", "imports multiprocessing.popen_fork"),
    ("from multiprocessing import util\nutil._exit_function()\n", "multiprocessing.util._exit_function"),
    ("from multiprocessing import spawn\nspawn._main(3)\n", "multiprocessing.spawn._main"),
    ("from multiprocessing.context import reduction\nreduction._mode\n", "multiprocessing.context.reduction._mode"),
    ("from multiprocessing.util import _close_stdin\n", "imports multiprocessing.util._close_stdin"),
    ("import multiprocessing\nctx = multiprocessing.get_context('forkserver')\np = ctx.Process()\np._popen\n",
     "multiprocessing.get_context().Process()._popen"),
    ("import multiprocessing as mp\ndef f():\n    with mp.Pool() as pool:\n        pool._pool\n",
     "multiprocessing.Pool()._pool"),
    ("import multiprocessing\nclass P(multiprocessing.Process):\n    def _bootstrap(self):\n        pass\n",
     "defines _bootstrap in a subclass of a multiprocessing class"),
    ("import multiprocessing\ngetattr(multiprocessing.forkserver, '_forkserver')\n",
     "getattr(..., '_forkserver')"),
    ("from concurrent.futures import process\nprocess._python_exit()\n",
     "concurrent.futures.process._python_exit"),
    ("x = anything._forkserver_alive_fd\n", "._forkserver_alive_fd"),
])
def test_each_kind_of_private_use_is_caught(source, what):
    assert what in {w for _, w in private_uses(source)}


@pytest.mark.parametrize("source", [
    "class Queue:\n    def __init__(self):\n        self._jobs = []\n    def _stop(self):\n        self._jobs.clear()\n",
    "import multiprocessing\nctx = multiprocessing.get_context('spawn')\np = ctx.Process(target=print)\np.start()\n",
    "from multiprocessing.connection import Connection, wait\nwait([Connection(3)], 0)\n",
    "import multiprocessing\ndef f(process):\n    process._internal_of_ours()\n",
    "import multiprocessing\nserver = multiprocessing.get_context('spawn')\nserver = object()\nserver._stop()\n",
    '"""Docstrings may name Popen._launch and _forkserver_pid."""\n# so may comments: set_spawning_popen\n',
    "from ._workers import _stop\n_stop()\n",
])
def test_the_projects_own_private_names_are_not_flagged(source):
    assert private_uses(textwrap.dedent(source)) == []
