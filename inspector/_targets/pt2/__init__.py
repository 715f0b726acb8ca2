"""Load a stranger's ``.pt2`` archive without running code from it (docs/design.md, "What is trusted").

``torch.export.load`` trusts its input. Measured on torch 2.13, a crafted archive runs code
through several doors besides pickles:

* size expressions (``expr_str``) in the model JSON are parsed with sympy's ``sympify``, an eval;
* any member under ``data/aotinductor/`` makes torch hand the archive to the AOTInductor loader,
  which runs a compiler command read from the archive (``system()``), ``dlopen``s a bundled
  shared library, extracts ``../`` member names outside its temp folder and leaves that folder
  behind;
* placeholder and node names, parameter/buffer/constant names, graph-argument names, kwarg
  names, ``forward_arg_names`` and the keyword names of the input treespec are pasted into the
  Python source that torch.fx generates and compiles (at load time for placeholder names);
* ``guards_code`` strings, and dict keys of the stored example inputs, are pasted into the
  guard function that ``ExportedProgram.module()`` compiles;
* pytree contexts may name a module to import (``{"__enum__": ..., "fqn": "mod:Cls"}``, a
  defaultdict's ``default_factory_module``), found through ``sys.path`` (the current folder);
* members are decompressed without a size cap, and a zero-byte weight member makes torch
  allocate a zero tensor of whatever shape the JSON claims.

So the archive is checked here against an allowlist BEFORE torch parses any of it: only the
members a plain ``torch.export.save`` of a CPU program writes, size-capped from the zip headers
and again while reading, every JSON field walked against torch's own schema with a strict rule
for every string that can reach an eval, an import or generated code. Only then is a fresh
archive holding exactly the checked bytes given to torch's loader, with tensor-only unpickling
forced for the duration (defence in depth); torch never sees the original file, so it cannot
extract, compile or dlopen anything and leaves no temp folder. The stored example inputs are a
pickle: torch unpickles them tensors-only, and their dict keys (which reach the guard code) are
checked before the program is returned. Every refusal is an ``InspectorError`` of one line.

The checks live in one module per part and this module puts them together: ``_zip`` (which
members may be in the archive, how big, read how), ``_schema`` (the JSON walked against torch's
schema, with the pytree-spec and operator rules), ``_sizes`` (the size-expression grammar),
``_guards`` (the guard grammar) and ``_common`` (the caps, the refusal and the name rules).
"""

from __future__ import annotations

import tempfile
import contextlib
import io
import os
import threading
import types
import zipfile
from pathlib import Path

import torch

from ..._base.errors import InspectorError, first_line
from ._common import (_SAFE_TEXT_RE, MAX_ARCHIVE_BYTES, _display, _key_ok, _message, _one_line, _q, _Refusal, is_name,
                      is_path)
from ._guards import check_guard
from ._schema import _parse_json, _Walker, check_operator
from ._sizes import check_expression
from ._zip import (_CONSTANTS_CONFIG, _MODEL_JSON, _ROOT, _SAMPLE_INPUTS, _TINY_MEMBERS, _WEIGHTS_CONFIG,
                   _check_directory, _check_names, _check_nested_torch_save, _Checked, _check_sizes, _Member, _read,
                   _read_chunks)

__all__ = ["load_pt2", "load_pt2_bytes", "check_expression", "check_guard", "check_operator"]


# ----------------------------------------------------------------------------- public entry


def load_pt2(path: str | os.PathLike) -> torch.export.ExportedProgram:
    """Load a ``.pt2`` archive written by ``torch.export.save`` without running code from it.

    The archive is checked first (members, sizes, every JSON field); then torch loads a copy
    holding exactly the checked bytes, with every tensor unpickled ``weights_only`` and the
    other unpicklers refusing. Anything outside what a plain ``torch.export.save`` of a CPU
    program writes is refused with a one-line ``InspectorError`` naming the member and the risk.
    """
    path = Path(path)
    shown = _display(path)
    if not path.is_file():
        raise InspectorError(f"no such file: {shown}")
    try:
        checked = _check_archive(path)
    except _Refusal as exc:
        raise InspectorError(_message(shown, exc)) from exc
    except RecursionError:
        raise InspectorError(f"refusing to load {shown}: the archive is nested too deeply to check") from None
    except MemoryError:  # the archive, or this process's memory limit: say which could not be told apart
        raise InspectorError(f"refusing to load {shown}: out of memory while checking it (the archive is too big "
                             "for the memory this process may use)") from None
    except Exception as exc:  # a shape the checks did not foresee; torch never saw it
        raise InspectorError(f"refusing to load {shown}: the archive is malformed ({type(exc).__name__})") from exc
    try:
        with _no_code_from_archives():
            # lazy: torch's private archive reader, looked up when one is read
            from torch.export.pt2_archive import _package

            contents = _package.load_pt2(checked.buffer)
        program = contents.exported_programs.get("model")
        if program is None:
            raise RuntimeError("the archive holds no program named 'model'")
    except _Refused as exc:
        raise InspectorError(_one_line(f"refusing to load {shown}: {exc}")) from None
    except Exception as exc:  # any loader failure is a bad file for the user
        if "weights_only" in str(exc) or "Unpickl" in type(exc).__name__:
            raise InspectorError(
                f"refusing to load {shown}: it holds pickled Python objects beyond plain tensors, "
                "which could run code; re-export it with plain tensor weights and inputs"
            ) from None
        raise InspectorError(
            _one_line(f"cannot load {shown} as a torch.export .pt2 archive: {_q(first_line(exc), 200)}")
        ) from exc
    try:
        _check_loaded(program)
    except _Refusal as exc:
        raise InspectorError(_message(shown, exc)) from exc
    _state_as_leaves(program)
    return program


def load_pt2_bytes(data: bytes) -> torch.export.ExportedProgram:
    """``load_pt2`` for an archive held in memory (a program sent to a worker process or a Ray task):
    the same checks, on a private temporary file."""

    with tempfile.TemporaryDirectory(prefix="fold-inspector-") as folder:
        path = Path(folder) / "program.pt2"
        path.write_bytes(data)
        return load_pt2(path)


# ----------------------------------------------------------------------------- tensor-only unpickling


class _Refused(Exception):
    """The archive asked for an unpickler that can run code."""


_ARCHIVE_LOCK = threading.Lock()


@contextlib.contextmanager
def _no_code_from_archives():
    """Within this scope, torch.load is weights_only and arbitrary unpicklers refuse.

    The one process-wide patch the inspector still makes, and why it is safe: it lasts exactly one
    ``torch.export.load`` call of an archive already checked (never a whole run), it only makes
    loading *stricter* (another thread's ``torch.load`` meanwhile gets ``weights_only=True``, which
    torch 2.13 already defaults to, and refuses pickled objects rather than running them), and it
    is restored on every exit path. torch offers no per-call hook for the unpicklers its archive
    reader uses, so a context variable cannot stand in for it here."""
    from torch.export.pt2_archive import _package  # lazy: torch's private archive reader, looked up when one is read

    def refuse(*_args, **_kwargs):
        raise _Refused("it holds pickled custom or opaque objects, which could run code")

    real_load = torch.load

    def tensors_only(f, *args, weights_only=None, **kwargs):  # forced below
        return real_load(f, *args, weights_only=True, **kwargs)

    with _ARCHIVE_LOCK:
        saved = (torch.load, _package.pickle, torch._C._pickle_load_obj)
        torch.load = tensors_only
        _package.pickle = types.SimpleNamespace(loads=refuse, load=refuse)
        torch._C._pickle_load_obj = refuse
        try:
            yield
        finally:
            torch.load, _package.pickle, torch._C._pickle_load_obj = saved


# ----------------------------------------------------------------------------- the checked copy


def _check_archive(path: Path) -> _Checked:
    size = path.stat().st_size
    if size > MAX_ARCHIVE_BYTES:
        raise _Refusal(f"the file is {size} bytes, over the cap of {MAX_ARCHIVE_BYTES} bytes")
    _check_directory(path)
    try:
        zf = zipfile.ZipFile(path)
    except Exception as exc:  # whatever zipfile makes of a crafted file
        raise _Refusal(f"it is not a zip archive ({_q(first_line(exc))})", invalid=True) from exc
    with zf:
        _root, members = _check_names(zf.infolist())
        _check_sizes(members)
        by_rel = {m.rel: m for m in members}
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:

            def put(m: _Member, data: bytes) -> None:
                zout.writestr(zipfile.ZipInfo(f"{_ROOT}/{m.rel}", date_time=(1980, 1, 1, 0, 0, 0)), data)

            for m in members:
                if m.kind == "tiny":
                    data = _read(zf, m)
                    if not _TINY_MEMBERS[m.rel].fullmatch(data):
                        raise _Refusal(f"unexpected content {_q(data)}", m.rel)
                    put(m, data)
                elif m.kind == "extra":
                    data = _read(zf, m)
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise _Refusal("extra file is not UTF-8 text", m.rel) from None
                    put(m, data)
            tensor_sizes = {m.rel: m.info.file_size for m in members if m.kind == "tensor"}
            for rel, folder in ((_WEIGHTS_CONFIG, "data/weights/"), (_CONSTANTS_CONFIG, "data/constants/")):
                m = by_rel[rel]
                data = _read(zf, m)
                _Walker(rel).check_payload_config(_parse_json(data, rel), folder, tensor_sizes)
                put(m, data)
            m = by_rel[_MODEL_JSON]
            data = _read(zf, m)
            _Walker(_MODEL_JSON).check_program(_parse_json(data, _MODEL_JSON))
            put(m, data)
            m = by_rel[_SAMPLE_INPUTS]
            data = _read(zf, m)
            _check_nested_torch_save(data, m.rel)
            put(m, data)
            for m in members:
                if m.kind == "tensor":
                    info = zipfile.ZipInfo(f"{_ROOT}/{m.rel}", date_time=(1980, 1, 1, 0, 0, 0))
                    info.file_size = m.info.file_size
                    with zout.open(info, "w", force_zip64=m.info.file_size > (1 << 31)) as w:
                        for chunk in _read_chunks(zf, m):
                            w.write(chunk)
    out.seek(0)
    return _Checked(buffer=out)


# ----------------------------------------------------------------------------- after torch's load


def _check_loaded(program: torch.export.ExportedProgram) -> None:
    """Defence in depth over what torch built, before anyone calls ``.module()`` on it: the
    example inputs (their dict keys reach the generated guard code) and every name in the graphs."""
    inputs = program.example_inputs
    if inputs is not None:
        _check_example_values(inputs)
        _check_example_form(program, inputs)
    _check_graph_names(program)


def _state_as_leaves(program: torch.export.ExportedProgram) -> None:
    """Every weight, buffer and constant a plain leaf tensor, as ``torch.export`` itself makes them: an archive
    whose tensor meta says ``requires_grad`` for a buffer makes torch's loader build it as the result of an op (a
    non-leaf), which no copy of the program survives ("Only Tensors created explicitly by the user (graph leaves)
    support the deepcopy protocol"). Nothing here computes gradients: such a tensor is read as its values, a
    parameter stays a parameter."""
    for table in (program.state_dict, program.constants):
        for name, value in list(table.items()):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                plain = value.detach()
                table[name] = torch.nn.Parameter(plain, requires_grad=value.requires_grad) \
                    if isinstance(value, torch.nn.Parameter) else plain


def _check_example_form(program: torch.export.ExportedProgram, inputs) -> None:
    """(args tuple, kwargs dict) shaped like the program's inputs: what torch's own
    ``example_inputs`` setter demands and its deserializer does not check (the inspector
    calls the program with them)."""
    if not (isinstance(inputs, tuple) and len(inputs) == 2 and isinstance(inputs[0], tuple)
            and isinstance(inputs[1], dict)):
        raise _Refusal("example inputs are not an (args tuple, kwargs dict) pair", _SAMPLE_INPUTS)
    # lazy: a private torch name, looked up when an archive is read
    from torch.export._unlift import _check_inputs_match

    try:
        _check_inputs_match(inputs[0], inputs[1], program.call_spec.in_spec)
    except Exception as exc:  # any mismatch torch finds, in whatever form (chained: it says which)
        raise _Refusal("example inputs do not have the structure of the program's inputs", _SAMPLE_INPUTS) from exc


def _check_example_values(inputs) -> None:
    """Plain tensors, numbers and strings in plain containers, nested at most 32 deep, dict keys plain names."""
    stack = [(inputs, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > 32:
            raise _Refusal("example inputs nest deeper than 32 levels", _SAMPLE_INPUTS)
        if isinstance(value, torch.Tensor):
            if type(value) is not torch.Tensor and not isinstance(value, torch.nn.Parameter):
                raise _Refusal(f"example input of type {type(value).__name__} is not a plain tensor", _SAMPLE_INPUTS)
        elif isinstance(value, (tuple, list)):
            stack.extend((v, depth + 1) for v in value)
        elif isinstance(value, dict):
            for k, v in value.items():
                if not _key_ok(k):
                    raise _Refusal(f"example input key {_q(k)} is not a plain name (it reaches generated guard code)",
                                   _SAMPLE_INPUTS)
                stack.append((v, depth + 1))
        elif value is None or isinstance(value, (bool, int, float)):
            pass
        elif isinstance(value, str):
            if not _SAFE_TEXT_RE.fullmatch(value):
                raise _Refusal(f"example input string {_q(value)} holds quotes or control characters", _SAMPLE_INPUTS)
        else:
            raise _Refusal(f"example input of type {type(value).__name__} is not a tensor, number or container", _SAMPLE_INPUTS)


def _check_graph_names(program: torch.export.ExportedProgram) -> None:
    """Every node, input, attribute and state name torch rebuilt is one that generated code may hold."""
    for module in program.graph_module.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            if not is_name(node.name):
                raise _Refusal(f"node name {_q(node.name)} is not a Python identifier")
            if node.op == "placeholder" and not is_name(node.target):
                raise _Refusal(f"input name {_q(node.target)} is not a Python identifier")
            if node.op in ("get_attr", "call_module") and not is_path(node.target):
                raise _Refusal(f"attribute {_q(node.target)} is not a dotted path of identifiers")
    for spec in program.graph_signature.input_specs:
        if spec.target is not None and not is_path(spec.target):
            raise _Refusal(f"state name {_q(spec.target)} is not a dotted path of identifiers")
