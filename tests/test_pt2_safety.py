"""A stranger's .pt2 runs no code, through any door of torch's loader (docs/design.md, "What is trusted").

For every door: a malicious archive rewritten from a real ``torch.export.save``, torch's own
loader running its payload (the positive control: it shows the test can fail), then our loader
refusing it with one line before any code runs, through every entry point (analyze, render,
compare, the widget, a saved session). Normal archives of every sample, of real-network
blocks and of a dynamic-shape program still load and give the same decisions.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
import textwrap
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest
import torch
from torch import nn

import inspector
import sample_models
from inspector import InspectorError
from inspector._targets import pt2 as _pt2
from inspector._targets.pt2._common import _ExprError

ROOT = Path(__file__).resolve().parent.parent
MiB = 1 << 20
BOMB_BYTES = 320 * MiB  # what the deflate bomb's model.json inflates to (about 320 KB deflated)
PROCESS_TIMEOUT = 180


# ----------------------------------------------------------------------------- models


class ConvMul(nn.Module):
    """The smallest fold site: conv(x) * 0.5."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x) * 0.5

    def example_inputs(self):
        return (torch.linspace(-1, 1, 3 * 16 * 16).reshape(1, 3, 16, 16),)


# ----------------------------------------------------------------------------- archive surgery


def _save(model: nn.Module, inputs: tuple, path: Path, **kw) -> Path:
    torch.export.save(torch.export.export(model, inputs, **kw), path)
    return path


def _members(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in z.infolist()}


def _key(members: dict, rel: str) -> str:
    return next(k for k in members if k.split("/", 1)[1] == rel)


def _root(members: dict) -> str:
    return next(iter(members)).split("/", 1)[0]


def _write(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), data)
    return path


def _edit_json(members: dict, rel: str, edit) -> None:
    key = _key(members, rel)
    doc = json.loads(members[key])
    edit(doc)
    members[key] = json.dumps(doc).encode()


def payload(marker: Path) -> str:
    """A Python expression that creates ``marker`` and contains no '.', so it survives being split
    on dots (parameter names) and is a valid sympy string (only builtin functions are called)."""
    chars = ",".join(f"chr({ord(c)})" for c in str(marker))
    return f'getattr(getattr(__import__("pathlib"),"Path")(getattr("","join")([{chars}])),"touch")()'


def _module_name(kind: str, where: Path) -> str:
    return f"evil_pt2_{kind}_{hashlib.sha1(str(where).encode()).hexdigest()[:10]}"


def _aoti_flags(compiler: str) -> bytes:
    return json.dumps({"compiler": compiler, "compile_only": True, "cflags": [], "definitions": [], "include_dirs": [],
                       "ldflags": [], "libraries_dirs": [], "libraries": [], "passthrough_args": []}).encode()


def _shared_library(folder: Path, marker: Path) -> bytes:
    """A shared library whose constructor creates ``marker`` (a fake one without a C compiler)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    if gcc is None:
        return b"\x7fELF not a real library"
    src = folder / "evil.c"
    src.write_text('#include <stdio.h>\n__attribute__((constructor)) static void evil(void) '
                   f'{{ FILE *f = fopen({json.dumps(str(marker))}, "w"); if (f) fclose(f); }}\n')
    subprocess.run([gcc, "-shared", "-fPIC", "-o", str(folder / "evil.so"), str(src)], check=True, timeout=60)
    return (folder / "evil.so").read_bytes()


# One builder per door: (clean archive, destination, marker) -> the malicious archive.


def evil_size_expression(base: Path, dst: Path, marker: Path) -> Path:
    members = _members(base)

    def edit(doc):
        doc["graph_module"]["graph"]["tensor_values"]["x"]["sizes"][0] = {
            "as_expr": {"expr_str": payload(marker), "hint": {"as_int": 1}}}

    _edit_json(members, "models/model.json", edit)
    return _write(dst, members)


def _with_aoti(base: Path, dst: Path, files: dict[str, bytes]) -> Path:
    members = _members(base)
    folder = f"{_root(members)}/data/aotinductor/model/"
    members.update({folder + name: data for name, data in files.items()})
    return _write(dst, members)


_AOTI_METADATA = json.dumps({"AOTI_DEVICE_KEY": "cpu"}).encode()


def evil_aoti_compiler(base: Path, dst: Path, marker: Path) -> Path:
    return _with_aoti(base, dst, {
        "wrapper.cpp": b"// never compiled: the 'compiler' is the payload",
        "wrapper_compile_flags.json": _aoti_flags(f"touch {shlex.quote(str(marker))}; true"),
        "wrapper_linker_flags.json": _aoti_flags("true"),
        "wrapper_metadata.json": _AOTI_METADATA,
    })


def evil_aoti_library(base: Path, dst: Path, marker: Path) -> Path:
    return _with_aoti(base, dst, {"wrapper.so": _shared_library(dst.parent, marker), "wrapper_metadata.json": _AOTI_METADATA})


def evil_aoti_traversal(base: Path, dst: Path, marker: Path) -> Path:
    """A member named data/aotinductor/model/../../..<marker>: extracted outside the temp folder."""
    escape = "../" * 40 + str(marker).lstrip("/")
    return _with_aoti(base, dst, {"wrapper_metadata.json": _AOTI_METADATA, escape: b"written outside the extraction folder"})


def evil_placeholder_name(base: Path, dst: Path, marker: Path) -> Path:
    """The input ``x`` renamed ``x=<payload>``: FX writes ``def forward(self, ..., x=<payload>)``."""
    members = _members(base)
    new = "x=" + payload(marker)

    def rename(node):
        if isinstance(node, dict):
            if node == {"name": "x"}:
                node["name"] = new
            for v in node.values():
                rename(v)
        elif isinstance(node, list):
            for v in node:
                rename(v)

    def edit(doc):
        rename(doc["graph_module"]["graph"])
        rename(doc["graph_module"]["signature"])
        values = doc["graph_module"]["graph"]["tensor_values"]
        values[new] = values.pop("x")

    _edit_json(members, "models/model.json", edit)
    return _write(dst, members)


def evil_parameter_name(base: Path, dst: Path, marker: Path) -> Path:
    """conv.weight renamed so that FX's ``getattr(self.conv, "<name>")`` closes its string and calls the payload."""
    members = _members(base)
    evil = 'conv.bias"),' + payload(marker) + ',getattr(self,"conv'

    def edit_program(doc):
        for spec in doc["graph_module"]["signature"]["input_specs"]:
            if spec.get("parameter", {}).get("parameter_name") == "conv.weight":
                spec["parameter"]["parameter_name"] = evil

    def edit_weights(doc):
        doc["config"][evil] = doc["config"].pop("conv.weight")

    _edit_json(members, "models/model.json", edit_program)
    _edit_json(members, "data/weights/model_weights_config.json", edit_weights)
    return _write(dst, members)


def evil_guard_code(base: Path, dst: Path, marker: Path) -> Path:
    members = _members(base)
    _edit_json(members, "models/model.json", lambda doc: doc.__setitem__("guards_code", [payload(marker) + " is None"]))
    return _write(dst, members)


def evil_example_input_key(base: Path, dst: Path, marker: Path) -> Path:
    """A dict key of the stored example inputs that closes the guard message's string literal."""
    members = _members(base)
    buf = io.BytesIO()
    torch.save((({'"+str(' + payload(marker) + ')+"': torch.zeros(1, 3, 16, 16)},), {}), buf)
    members[_key(members, "data/sample_inputs/model.pt")] = buf.getvalue()
    return _write(dst, members)


def _evil_module(folder: Path, name: str, marker: Path) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(f"""\
        import enum
        open({str(marker)!r}, "w").close()  # importing this module is the payload
        class E(enum.Enum):
            A = 1
        factory = list
        """))


def evil_pytree_enum(base: Path, dst: Path, marker: Path) -> Path:
    """An enum key in the kwargs dict context: torch imports ``module:Class`` to rebuild it."""
    name = _module_name("enum", dst.parent)
    _evil_module(dst.parent, name, marker)
    members = _members(base)

    def edit(doc):
        sig = doc["graph_module"]["module_call_graph"][0]["signature"]
        spec = json.loads(sig["in_spec"])
        spec[1]["children_spec"][1]["context"] = json.dumps([{"__enum__": True, "fqn": f"{name}:E", "name": "A"}])
        sig["in_spec"] = json.dumps(spec)

    _edit_json(members, "models/model.json", edit)
    return _write(dst, members)


def evil_pytree_defaultdict(base: Path, dst: Path, marker: Path) -> Path:
    """A defaultdict output spec: torch imports its default_factory_module by name."""
    name = _module_name("factory", dst.parent)
    _evil_module(dst.parent, name, marker)
    members = _members(base)

    def edit(doc):
        sig = doc["graph_module"]["module_call_graph"][0]["signature"]
        sig["out_spec"] = json.dumps([1, {"type": "collections.defaultdict", "children_spec": [], "context": {
            "default_factory_module": name, "default_factory_name": "factory", "dict_context": []}}])

    _edit_json(members, "models/model.json", edit)
    return _write(dst, members)


def evil_deflate_bomb(base: Path, dst: Path, marker: Path, size: int = BOMB_BYTES) -> Path:
    """models/model.json followed by ``size`` bytes of spaces (still valid JSON), deflated: ~1000:1."""
    members = _members(base)
    spaces = b" " * MiB
    with zipfile.ZipFile(dst, "w", compresslevel=9) as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            if name.endswith("models/model.json"):
                info.compress_type = zipfile.ZIP_DEFLATED
                with z.open(info, "w") as w:
                    w.write(data)
                    for _ in range(size // MiB):
                        w.write(spaces)
            else:
                z.writestr(info, data)
    return dst


def evil_zero_byte_weight(base: Path, dst: Path, marker: Path, shape=(8, 1024, 1024)) -> Path:
    """An empty weight member whose config claims a big shape: torch allocates torch.zeros(shape)."""
    members = _members(base)
    path_name = {}

    def edit(doc):
        meta = doc["config"]["conv.weight"]
        path_name["name"] = meta["path_name"]
        strides = [int(torch.tensor(shape[i + 1:]).prod()) for i in range(len(shape))]
        meta["tensor_meta"]["sizes"] = [{"as_int": n} for n in shape]
        meta["tensor_meta"]["strides"] = [{"as_int": s} for s in strides]

    _edit_json(members, "data/weights/model_weights_config.json", edit)
    members[_key(members, "data/weights/" + path_name["name"])] = b""
    return _write(dst, members)


DOORS = {
    "size-expression": evil_size_expression,
    "aoti-compiler-command": evil_aoti_compiler,
    "aoti-shared-library": evil_aoti_library,
    "aoti-path-traversal": evil_aoti_traversal,
    "placeholder-name": evil_placeholder_name,
    "parameter-name": evil_parameter_name,
    "guard-code": evil_guard_code,
    "example-input-key": evil_example_input_key,
    "pytree-enum-import": evil_pytree_enum,
    "pytree-defaultdict-import": evil_pytree_defaultdict,
    "deflate-bomb": evil_deflate_bomb,
    "zero-byte-weight": evil_zero_byte_weight,
}


# ----------------------------------------------------------------------------- fixtures and checks


@pytest.fixture(scope="module")
def base_pt2(tmp_path_factory) -> Path:
    model = ConvMul().eval()
    return _save(model, model.example_inputs(), tmp_path_factory.mktemp("base") / "conv_mul.pt2")


@pytest.fixture(scope="module")
def bomb_pt2(tmp_path_factory, base_pt2) -> Path:
    """The deflate bomb, built once (copies are cheap, building takes a second or two)."""
    return evil_deflate_bomb(base_pt2, tmp_path_factory.mktemp("bomb") / "bomb.pt2", Path("/nonexistent"))


@pytest.fixture(scope="module")
def evil(tmp_path_factory, base_pt2, bomb_pt2) -> dict[str, tuple[Path, Path]]:
    """Every malicious archive, built once for the entry-point tests: door -> (archive, marker)."""
    folder = tmp_path_factory.mktemp("evil")
    built = {}
    for door, build in DOORS.items():
        marker = folder / f"marker-{door}"
        dst = folder / f"{door}.pt2"
        if door == "deflate-bomb":
            shutil.copy(bomb_pt2, dst)
        else:
            build(base_pt2, dst, marker)
        built[door] = (dst, marker)
    return built


@pytest.fixture
def evil_door(request, evil, monkeypatch):
    """(archive, marker) of one door, with its folder importable and current (as in a notebook)."""
    archive, marker = evil[request.param]
    monkeypatch.chdir(archive.parent)
    monkeypatch.syspath_prepend(str(archive.parent))
    modules_before = set(sys.modules)
    assert not marker.exists()
    yield archive, marker
    assert not marker.exists(), f"the {request.param} payload ran"
    assert not [m for m in set(sys.modules) - modules_before if m.startswith("evil_pt2_")], "an archive module was imported"


def _refused(exc_info, archive: Path, *needles: str) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and "\r" not in message
    assert message.startswith(f"refusing to load {archive.name}: "), message
    for needle in needles:
        assert needle in message, message
    return message


def _ours_refuses(archive: Path, marker: Path, *needles: str) -> str:
    with pytest.raises(InspectorError) as info:
        _pt2.load_pt2(archive)
    message = _refused(info, archive, *needles)
    assert not marker.exists()
    return message


def _run(script: str, *args: str, cwd: Path, env: dict | None = None) -> dict:
    """Run ``script`` in a fresh interpreter; it prints its result as ``RESULT <json>``."""
    proc = subprocess.run([sys.executable, "-c", script, *args], cwd=cwd, env={**os.environ, **(env or {})},
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, f"child failed ({proc.returncode}): {proc.stderr[-2000:]}"
    return json.loads(lines[-1][len("RESULT "):])


_TORCH_LOADS = """
import json, sys, torch
results = {}
for name, path in json.loads(sys.argv[1]).items():
    try:
        torch.export.load(path)
        results[name] = "loaded"
    except Exception as exc:  # the payload has run by then, or not at all
        results[name] = type(exc).__name__
print("RESULT " + json.dumps(results))
"""


# ----------------------------------------------------------------------------- door 1: sympify


def test_size_expression_door(tmp_path, base_pt2):
    """Symbolic sizes are parsed with sympy's sympify (an eval) by torch.export.load itself."""
    marker = tmp_path / "marker"
    archive = evil_size_expression(base_pt2, tmp_path / "evil.pt2", marker)
    with pytest.raises(Exception):  # noqa: B017 - whatever torch makes of it: the marker is the check
        torch.export.load(str(archive))
    assert marker.exists(), "positive control: torch.export.load ran the size expression"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'models/model.json'", "is not a plain size expression (could run code)")


def test_serde_dynamic_shapes_is_not_a_door_of_load(tmp_path, base_pt2, monkeypatch):
    """torch/_export/serde/dynamic_shapes.py also sympifies, but only ``_load_dynamic_shapes`` (a
    spec a user passes to export) reaches it; neither torch.export.load nor our loader calls it."""
    from torch._export.serde import dynamic_shapes

    marker = tmp_path / "marker"
    spec = {"dims": {"s0": {"min": 2, "max": 8, "derived": [payload(marker)]}}, "dynamic_shapes": {"x": {"0": "s0"}}}
    with pytest.raises(Exception):  # noqa: B017 - whatever torch makes of it: the marker is the check
        dynamic_shapes._load_dynamic_shapes(spec, from_dict=True)
    assert marker.exists(), "positive control: _load_dynamic_shapes sympifies its spec"

    def never(*_a, **_k):
        raise AssertionError("_load_dynamic_shapes was called")

    monkeypatch.setattr(dynamic_shapes, "_load_dynamic_shapes", never)
    model = ConvMul().eval()
    dynamic = _save(model, (torch.randn(2, 3, 16, 16),), tmp_path / "dynamic.pt2",
                    dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=8)}})
    torch.export.load(str(dynamic))
    _pt2.load_pt2(dynamic)


# ----------------------------------------------------------------------------- door 2: AOTInductor


@pytest.fixture(scope="module")
def aoti_control(tmp_path_factory, base_pt2) -> dict:
    """torch.export.load of the three AOTInductor archives, in a child process (it dlopens and
    runs commands), with TMPDIR pointing at a folder of our own to see what it leaves behind."""
    folder = tmp_path_factory.mktemp("aoti")
    scratch = folder / "tmp"
    scratch.mkdir()
    markers = {name: folder / f"marker-{name}" for name in ("compiler", "library", "traversal")}
    archives = {
        "compiler": evil_aoti_compiler(base_pt2, folder / "compiler.pt2", markers["compiler"]),
        "library": evil_aoti_library(base_pt2, folder / "library.pt2", markers["library"]),
        "traversal": evil_aoti_traversal(base_pt2, folder / "traversal.pt2", markers["traversal"]),
    }
    results = _run(_TORCH_LOADS, json.dumps({k: str(v) for k, v in archives.items()}), cwd=folder,
                   env={"TMPDIR": str(scratch)})
    left = sorted(p.name for p in scratch.iterdir() if p.name.startswith("aotinductor_"))
    return {"folder": folder, "scratch": scratch, "markers": markers, "archives": archives, "results": results,
            "left": left, "real_library": (shutil.which("gcc") or shutil.which("cc")) is not None}


def test_aoti_compiler_command_door(aoti_control):
    marker, archive = aoti_control["markers"]["compiler"], aoti_control["archives"]["compiler"]
    assert marker.exists(), f"positive control: the archive's compiler command ran ({aoti_control['results']})"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'data/aotinductor/model/", "AOTInductor", "could run code")


def test_aoti_shared_library_door(aoti_control):
    marker, archive = aoti_control["markers"]["library"], aoti_control["archives"]["library"]
    if not aoti_control["real_library"]:
        pytest.skip("no C compiler to build the positive control's shared library")
    assert marker.exists(), f"positive control: the bundled library's constructor ran ({aoti_control['results']})"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'data/aotinductor/model/wrapper.so'", "could run code")


def test_aoti_path_traversal_door(aoti_control):
    marker, archive = aoti_control["markers"]["traversal"], aoti_control["archives"]["traversal"]
    assert marker.read_bytes() == b"written outside the extraction folder", "positive control: ../ escaped"
    marker.unlink()
    _ours_refuses(archive, marker, "'..'", "path escape")


def test_aoti_extraction_folders_are_left_behind_but_not_by_us(aoti_control, base_pt2, tmp_path, monkeypatch):
    # positive control: every failed AOTInductor load left an aotinductor_XXXXXX folder in TMPDIR
    assert len(aoti_control["left"]) >= 2, aoti_control["left"]
    # our loader writes nothing to the temp folder, whether it loads or refuses
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr("tempfile.tempdir", None)
    _pt2.load_pt2(base_pt2)
    for archive in aoti_control["archives"].values():
        with pytest.raises(InspectorError):
            _pt2.load_pt2(archive)
    assert sorted(os.listdir(scratch)) == []


# ----------------------------------------------------------------------------- door 3: generated code


def test_placeholder_name_door(tmp_path, base_pt2):
    """A placeholder name is written verbatim into ``def forward(...)``: code runs at load time."""
    marker = tmp_path / "marker"
    archive = evil_placeholder_name(base_pt2, tmp_path / "evil.pt2", marker)
    torch.export.load(str(archive))
    assert marker.exists(), "positive control: torch.export.load compiled the name into forward()"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'models/model.json'", "is not a Python identifier (it reaches generated code)")


def test_parameter_name_door(tmp_path, base_pt2):
    """A parameter name becomes ``getattr(self.conv, "<name>")`` in ep.module()'s code."""
    marker = tmp_path / "marker"
    archive = evil_parameter_name(base_pt2, tmp_path / "evil.pt2", marker)
    module = torch.export.load(str(archive)).module()
    with pytest.raises(RuntimeError):  # the payload runs, then the weight is a tuple
        module(*ConvMul().example_inputs())
    assert marker.exists(), "positive control: the parameter name ran as code"
    marker.unlink()
    _ours_refuses(archive, marker, "is not a dotted path of Python identifiers")


def test_guard_code_door(tmp_path, base_pt2):
    """``guards_code`` strings are compiled by ep.module() into its guard function."""
    marker = tmp_path / "marker"
    archive = evil_guard_code(base_pt2, tmp_path / "evil.pt2", marker)
    torch.export.load(str(archive)).module()(*ConvMul().example_inputs())
    assert marker.exists(), "positive control: the guard ran"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'models/model.json'", "is not a plain shape guard")


def test_example_input_key_door(tmp_path, base_pt2):
    """Dict keys of the stored example inputs end up inside a string literal of the guard code."""
    marker = tmp_path / "marker"
    archive = evil_example_input_key(base_pt2, tmp_path / "evil.pt2", marker)
    torch.export.load(str(archive)).module()(*ConvMul().example_inputs())
    assert marker.exists(), "positive control: the example-input key ran"
    marker.unlink()
    _ours_refuses(archive, marker, "member 'data/sample_inputs/model.pt'", "example input key")


def test_operator_target_is_checked_too(tmp_path, base_pt2):
    """torch resolves node targets by getattr from ``torch`` (``torch.os.system`` resolves); in 2.13
    the ExportedProgram verifier then rejects non-operators, and our loader refuses them first."""
    marker = tmp_path / "marker"
    members = _members(base_pt2)

    def edit(doc):
        for node in doc["graph_module"]["graph"]["nodes"]:
            if node["target"] == "torch.ops.aten.mul.Tensor":
                node["target"] = "torch.os.system"
                node["inputs"] = [{"name": "", "arg": {"as_string": f"touch {shlex.quote(str(marker))}"}, "kind": 1}]

    _edit_json(members, "models/model.json", edit)
    archive = _write(tmp_path / "evil.pt2", members)
    with pytest.raises(Exception, match="not an allowed operator type"):
        torch.export.load(str(archive))
    assert not marker.exists()
    _ours_refuses(archive, marker, "operator 'torch.os.system'")


# ----------------------------------------------------------------------------- door 4: pytree imports


def test_pytree_import_doors(tmp_path, base_pt2):
    """Pytree contexts name modules that torch imports, found through the current folder."""
    markers = {"enum": tmp_path / "marker-enum", "defaultdict": tmp_path / "marker-defaultdict"}
    archives = {"enum": evil_pytree_enum(base_pt2, tmp_path / "enum.pt2", markers["enum"]),
                "defaultdict": evil_pytree_defaultdict(base_pt2, tmp_path / "defaultdict.pt2", markers["defaultdict"])}
    results = _run(_TORCH_LOADS, json.dumps({k: str(v) for k, v in archives.items()}), cwd=tmp_path)
    for name, marker in markers.items():
        assert marker.exists(), f"positive control: torch imported the {name} module ({results})"
        marker.unlink()
    # in this process, with the folder importable as it is in a notebook
    sys.path.insert(0, str(tmp_path))
    try:
        _ours_refuses(archives["enum"], markers["enum"], "member 'models/model.json'", "import a module")
        _ours_refuses(archives["defaultdict"], markers["defaultdict"], "member 'models/model.json'", "import its module")
    finally:
        sys.path.remove(str(tmp_path))
    assert not [m for m in sys.modules if m.startswith("evil_pt2_")]


# ----------------------------------------------------------------------------- door 5: sizes


_BOMB_CHILD = """
import json, resource, sys, time, types
from pathlib import Path
root, normal, bomb = sys.argv[1:4]
package = types.ModuleType("inspector")  # import inspector._targets.pt2 without the package's heavy imports
package.__path__ = [str(Path(root) / "inspector")]
sys.modules["inspector"] = package
import torch
from inspector._targets import pt2 as _pt2
from inspector._base.errors import InspectorError

def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024

# The resident size now, with the peak reset to it (Linux: clear_refs 5), so that the next peak is this load's:
# the warm-up's own peak, higher than where the process stands after it, would otherwise hide part of it.
def start():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:  # no reset here: the peak so far is the base
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, False
    return status("VmRSS"), True

def grown(base, reset):
    peak = status("VmHWM") if reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return peak - base

torch.export.load(normal)  # warm up both loaders first
_pt2.load_pt2(normal)
base, reset = start()
t = time.perf_counter()
try:
    _pt2.load_pt2(bomb)
    ours = "loaded"
except InspectorError as exc:
    ours = str(exc)
ours_seconds = time.perf_counter() - t
ours_growth = grown(base, reset)
base, reset = start()
t = time.perf_counter()
try:
    torch.export.load(bomb)
    theirs = "loaded"
except Exception as exc:
    theirs = type(exc).__name__
theirs_seconds = time.perf_counter() - t
print("RESULT " + json.dumps(dict(ours=ours, ours_seconds=ours_seconds, ours_growth=ours_growth, theirs=theirs,
                                   theirs_seconds=theirs_seconds, theirs_growth=grown(base, reset), reset=reset)))
"""


def test_deflate_bomb_door(tmp_path, base_pt2, bomb_pt2):
    """A ~320 KB member that inflates to 320 MiB: torch materializes all of it; we refuse from the header."""
    archive = Path(shutil.copy(bomb_pt2, tmp_path / "bomb.pt2"))
    assert archive.stat().st_size < 2 * MiB
    r = _run(_BOMB_CHILD, str(ROOT), str(base_pt2), str(archive), cwd=tmp_path)
    # positive control: torch's loader grew the process by at least half the inflated size, each load's own peak
    # above where the process stood (a busy machine's reclaimer takes back cold pages first). With the peak reset
    # before each load it measured 2.0x alone; with the warm-up's peak as the base it read 0.49x to 0.83x under the
    # whole suite. Ours grows by nothing.
    assert r["theirs"] == "loaded" and r["theirs_growth"] > 0.5 * BOMB_BYTES, r
    assert r["ours"].startswith("refusing to load bomb.pt2: member 'models/model.json': uncompressed size"), r
    assert r["ours_seconds"] < 0.5 and r["ours_growth"] < 16 * MiB, r


def _lie_about_size(path: Path, rel: str, claimed: int) -> None:
    """Patch a member's uncompressed size in both its local header and the central directory."""
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith(rel))
    name = info.filename.encode()
    assert data[info.header_offset:info.header_offset + 4] == b"PK\x03\x04"
    struct.pack_into("<I", data, info.header_offset + 22, claimed)
    pos = data.find(b"PK\x01\x02")
    while data[pos + 46:pos + 46 + len(name)] != name:
        pos = data.find(b"PK\x01\x02", pos + 4)
    struct.pack_into("<I", data, pos + 24, claimed)
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("lying_header", [False, True], ids=["honest-header", "lying-header"])
def test_bomb_refusal_is_fast_and_small(tmp_path, bomb_pt2, lying_header):
    archive = Path(shutil.copy(bomb_pt2, tmp_path / "bomb.pt2"))
    if lying_header:  # the headers claim 10 kB: the cap is enforced while reading, not trusted
        _lie_about_size(archive, "models/model.json", 10_000)
    tracemalloc.start()
    t = time.perf_counter()
    try:
        with pytest.raises(InspectorError) as info:
            _pt2.load_pt2(archive)
        seconds = time.perf_counter() - t
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = _refused(info, archive, "member 'models/model.json'")
    assert ("cannot be read" if lying_header else "over the cap") in message
    assert seconds < 1.0, seconds
    assert peak < 16 * MiB, peak  # Python-level allocations while refusing (the bomb is 320 MiB)


def test_zero_byte_weight_door(tmp_path, base_pt2):
    """An empty weight member with a claimed shape makes torch allocate zeros of that shape."""
    marker = tmp_path / "unused"
    archive = evil_zero_byte_weight(base_pt2, tmp_path / "zero.pt2", marker)
    program = torch.export.load(str(archive))
    assert program.state_dict["conv.weight"].numel() == 8 * 1024 * 1024, "positive control: 32 MiB from 0 bytes"
    del program
    _ours_refuses(archive, marker, "member 'data/weights/model_weights_config.json'",
                  "claims 33554432 bytes but its member holds 0")


# ----------------------------------------------------------------------------- every entry point refuses


_ALL_DOORS = list(DOORS)


@pytest.mark.parametrize("evil_door", _ALL_DOORS, indirect=True)
def test_analyze_refuses(evil_door):
    archive, _ = evil_door
    with pytest.raises(InspectorError) as info:
        inspector.analyze(str(archive))
    _refused(info, archive)


@pytest.mark.parametrize("evil_door", _ALL_DOORS, indirect=True)
def test_render_refuses(evil_door):
    archive, _ = evil_door
    with pytest.raises(InspectorError) as info:
        inspector.present.render(inspector.analyze(str(archive), stage="aten"))
    _refused(info, archive)


@pytest.mark.requires_tosa
@pytest.mark.parametrize("evil_door", _ALL_DOORS, indirect=True)
def test_compare_refuses(evil_door):
    archive, _ = evil_door
    with pytest.raises(InspectorError) as info:
        inspector.compare(str(archive), variants=("upstream",))
    _refused(info, archive)


@pytest.mark.requires_dot
@pytest.mark.parametrize("evil_door", _ALL_DOORS, indirect=True)
def test_widget_refuses(evil_door):
    import widgets

    archive, _ = evil_door
    with pytest.raises(InspectorError) as info:
        widgets.FoldInspector(str(archive))
    _refused(info, archive)


@pytest.mark.requires_dot
@pytest.mark.parametrize("evil_door", _ALL_DOORS, indirect=True)
def test_session_refuses(evil_door, tmp_path):
    import widgets

    archive, _ = evil_door
    session = tmp_path / "evil-session.json"
    session.write_text(json.dumps({"version": 1, "target": str(archive), "stage": "tfa", "policy": "upstream",
                                   "markers": [], "selected": None, "variants": ["upstream"], "steps": 1,
                                   "results": None, "results_for": None}))
    with pytest.raises(InspectorError) as info:
        widgets.FoldInspector.load_session(session)
    _refused(info, archive)


# ----------------------------------------------------------------------------- the allowlist itself


def _rewritten(base: Path, dst: Path, edit) -> Path:
    members = _members(base)
    edit(members)
    return _write(dst, members)


@pytest.mark.parametrize("case", ["absolute", "dotdot", "backslash", "duplicate", "other-root", "executorch",
                                  "custom-object", "second-model", "pickled-weight", "nested-deflate"])
def test_member_allowlist(tmp_path, base_pt2, case):
    def edit(members):
        root = _root(members)
        if case == "absolute":
            members["/etc/evil"] = b"x"
        elif case == "dotdot":
            members[f"{root}/extra/../../evil"] = b"x"
        elif case == "backslash":
            members[f"{root}/extra\\evil"] = b"x"
        elif case == "duplicate":
            members[f"{root}/extra/Notes"] = b"x"
            members[f"{root}/extra/notes"] = b"y"
        elif case == "other-root":
            members["elsewhere/extra/notes"] = b"x"
        elif case == "executorch":
            members[f"{root}/data/executorch/program.pte"] = b"x"
        elif case == "custom-object":
            members[f"{root}/data/constants/custom_obj_0"] = b"x"
        elif case == "second-model":
            members[f"{root}/models/other.json"] = members[_key(members, "models/model.json")]
        elif case == "pickled-weight":
            _edit_json(members, "data/weights/model_weights_config.json",
                       lambda doc: doc["config"]["conv.weight"].__setitem__("use_pickle", True))
        elif case == "nested-deflate":
            key = _key(members, "data/sample_inputs/model.pt")
            inner = io.BytesIO()
            with zipfile.ZipFile(io.BytesIO(members[key])) as src, zipfile.ZipFile(inner, "w", zipfile.ZIP_DEFLATED) as dst:
                for item in src.infolist():
                    dst.writestr(item.filename, src.read(item), zipfile.ZIP_DEFLATED)
            members[key] = inner.getvalue()

    archive = _rewritten(base_pt2, tmp_path / f"{case}.pt2", edit)
    with pytest.raises(InspectorError) as info:
        _pt2.load_pt2(archive)
    _refused(info, archive)


def test_a_duplicate_member_name_in_the_zip_is_refused(tmp_path, base_pt2):
    members = _members(base_pt2)
    archive = tmp_path / "dup.pt2"
    with pytest.warns(UserWarning, match="Duplicate name"):
        with zipfile.ZipFile(archive, "w") as z:
            for name, data in members.items():
                z.writestr(name, data)
            z.writestr(_key(members, "models/model.json"), b"{}")
    with pytest.raises(InspectorError, match="duplicate member name"):
        _pt2.load_pt2(archive)


def _graph(doc):
    return doc["graph_module"]["graph"]


def _signature(doc):
    return doc["graph_module"]["module_call_graph"][0]["signature"]


def _mul_node(doc):
    return next(n for n in _graph(doc)["nodes"] if n["target"] == "torch.ops.aten.mul.Tensor")


_JSON_RULES = {
    # field edit -> the words of the refusal
    "kwargs-key": (lambda d: _signature(d).__setitem__("in_spec", json.dumps([1, {
        "type": "builtins.tuple", "context": "null", "children_spec": [
            {"type": "builtins.tuple", "context": "null",
             "children_spec": [{"type": None, "context": None, "children_spec": []}]},
            {"type": "builtins.dict", "context": json.dumps(["a-b"]), "children_spec": [
                {"type": None, "context": None, "children_spec": []}]}]}])), "keyword argument name"),
    "forward-arg-name": (lambda d: _signature(d).__setitem__("forward_arg_names", ["x=1"]), "forward argument name"),
    "range-bound": (lambda d: d.__setitem__("range_constraints", {"s0": {"min_val": "2; import os", "max_val": None}}),
                    "is not an integer"),
    "range-key": (lambda d: d.__setitem__("range_constraints", {"__import__('os')": {"min_val": 2, "max_val": None}}),
                  "range constraint"),
    "module-stack-path": (lambda d: _mul_node(d)["metadata"].__setitem__("nn_module_stack", 'L__self__,a"b,torch.nn.Conv2d'),
                          "nn_module_stack"),
    "source-fn": (lambda d: _mul_node(d)["metadata"].__setitem__("source_fn_stack", "mul,#ns:op"), "source_fn_stack"),
    "unknown-field": (lambda d: _graph(d).__setitem__("zzz", 1), "unknown field"),
    "device": (lambda d: _graph(d)["tensor_values"]["x"]["device"].__setitem__("type", "cpu'),(1"), "device type"),
    "verifier": (lambda d: d.__setitem__("verifiers", ["TRAINING; x"]), "verifier"),
    "custom-object": (lambda d: _graph(d).__setitem__("custom_obj_values", {"o": {"name": "o", "class_fqn": "x.y"}}),
                      "custom (TorchScript) objects"),
    "pytree-type": (lambda d: _signature(d).__setitem__("out_spec", json.dumps([1, {
        "type": "evil.Type", "context": "null", "children_spec": []}])), "pytree type"),
    "operator-argument": (lambda d: _mul_node(d)["inputs"][1].__setitem__("arg", {"as_operator": "torch.load"}),
                          "operator 'torch.load'"),
    "string-input": (lambda d: _graph(d)["inputs"].append({"as_string": "a' + __import__('os') + '"}), "constant string input"),
    "graph-name": (lambda d: _mul_node(d)["inputs"][0]["arg"].__setitem__("as_graph", {"name": "g.h", "graph": {}}) or
                   _mul_node(d)["inputs"][0]["arg"].pop("as_tensor"), "subgraph name"),
}


@pytest.mark.parametrize("rule", list(_JSON_RULES))
def test_json_rules(tmp_path, base_pt2, rule):
    edit, words = _JSON_RULES[rule]
    members = _members(base_pt2)
    _edit_json(members, "models/model.json", edit)
    archive = _write(tmp_path / f"{rule}.pt2", members)
    with pytest.raises(InspectorError) as info:
        _pt2.load_pt2(archive)
    _refused(info, archive, "member 'models/model.json'", words)


def test_zip_directory_is_bounded_before_parsing(tmp_path, base_pt2):
    data = bytearray(_write(tmp_path / "plain.pt2", _members(base_pt2)).read_bytes())  # no zip64 records
    end = data.rfind(b"PK\x05\x06")
    struct.pack_into("<HH", data, end + 8, 30_000, 30_000)  # entries on this disk, entries in total
    archive = tmp_path / "many.pt2"
    archive.write_bytes(bytes(data))
    with pytest.raises(InspectorError, match="30000 zip members is more than the cap of 20000"):
        _pt2.load_pt2(archive)


def test_extra_files_are_plain_data(tmp_path):
    model = ConvMul().eval()
    archive = tmp_path / "extra.pt2"
    torch.export.save(torch.export.export(model, model.example_inputs()), archive, extra_files={"notes.txt": "hello"})
    _pt2.load_pt2(archive)


def test_json_nesting_is_bounded(tmp_path, base_pt2):
    def edit(members):
        key = _key(members, "models/model.json")
        doc = json.loads(members[key])
        deep: list = []
        for _ in range(200):
            deep = [deep]
        doc["graph_module"]["metadata"] = {"custom": json.dumps(deep)}
        members[key] = json.dumps(doc).encode()

    archive = _rewritten(base_pt2, tmp_path / "deep.pt2", edit)
    with pytest.raises(InspectorError, match="nested deeper than 100 levels") as info:
        _pt2.load_pt2(archive)
    _refused(info, archive)
    (tmp_path / "really-deep.json").write_text("[" * 100_000 + "]" * 100_000)
    members = _members(base_pt2)
    members[_key(members, "models/model.json")] = (tmp_path / "really-deep.json").read_bytes()
    with pytest.raises(InspectorError, match="nested deeper"):
        _pt2.load_pt2(_write(tmp_path / "really-deep.pt2", members))


def test_refusals_are_one_line_and_quote_at_most_sixty_characters(tmp_path, base_pt2):
    long_evil = "__import__('os').system('echo pwned')\n" * 40
    members = _members(base_pt2)
    _edit_json(members, "models/model.json", lambda doc: doc["graph_module"]["graph"]["tensor_values"]["x"]["sizes"]
               .__setitem__(0, {"as_expr": {"expr_str": long_evil, "hint": None}}))
    archive = _write(tmp_path / "evil.pt2", members)
    with pytest.raises(InspectorError) as info:
        _pt2.load_pt2(archive)
    message = _refused(info, archive, "size expression \"__import__('os')")
    assert len(message) < 250 and "echo pwned')\\n__import__" in message and "...\" is not" in message


@pytest.mark.parametrize("text", [
    "Symbol('s77', positive=True, integer=True)",
    "Add(FloorDiv(Add(Symbol('s0', positive=True, integer=True), Integer(-1)), Integer(2)), Integer(1))",
    "Mul(Integer(3), Max(Integer(1), TruncToInt(Mul(Float('0.5', precision=53), "
    "ToFloat(Symbol('s0', positive=True, integer=True))))))",
    "StrictLessThan(Symbol('u1', integer=True), Integer(100))",
    "Pow(Symbol('s0', positive=True, integer=True), Integer(2))",
    "Piecewise(ExprCondPair(Symbol('s0'), StrictGreaterThan(Symbol('s0'), Integer(2))), ExprCondPair(Integer(1), true))",
    "2*s77", "s0 + 1", "(s0 - 1)//2 + 1", "Mod(s0, 2)", "Integer(2)**Integer(10)",
])
def test_expression_grammar_accepts_what_torch_writes(text):
    _pt2.check_expression(text)


@pytest.mark.parametrize("text", [
    "__import__('os').system('x')", "s0.__class__", "Symbol('x'); 1", "Symbol('__import__')", "eval('1')",
    "sympify('s0')", "Function('f')(s0)", "s0[0]", "lambda: 1", "Integer(10)**Integer(10)**Integer(10)",
    "Pow(Integer(9), Integer(99999999))", "Symbol('s0', positive=__import__)", "Float('1e9999999')",
    "s0 if s0 else 1", "'s0'", "Symbol(\"s0\")", "(" * 100 + "s0" + ")" * 100, "1" * 100, "",
])
def test_expression_grammar_refuses_everything_else(text):
    with pytest.raises(_ExprError):
        _pt2.check_expression(text)


@pytest.mark.parametrize("text", [
    "L['x'].size()[0] > 4",
    "L['y'].size()[0] == (2*L['x'].size()[0])",
    "1 + (L['x'].size()[0] // 2) <= L['x'].size()[0]",
    "math.trunc(0.5*torch.sym_float(L['x'].size()[2])) != 1",
    "L['x'].size()[3] == 1 or min(L['x'].size()[3], 3*L['x'].size()[3]*L['x'].size()[2]) == L['x'].size()[3]",
    "(L['x'].size()[3] % 2) == 0", "L['k'] >= 2", "L['args'][0]['a-b'].stride()[1] == 1",
])
def test_guard_grammar_accepts_what_torch_writes(text):
    _pt2.check_guard(text)


@pytest.mark.parametrize("text", [
    "__import__('os')", "L['x'].__class__", "L['x'].size()[0] == eval('1')", "L[\"x\"].size()[0]",
    "getattr(L, 'x')", "(lambda: 1)()", "[c for c in L]", "L['x'] == 'abc'", "math.os", "torch.load('x')",
    "L['x'].size()[0] == 2 ** 2 ** 99", "L['a\\'b'].size()[0]", "L['x'].size()[0]\n== 1",
])
def test_guard_grammar_refuses_everything_else(text):
    with pytest.raises(_ExprError):
        _pt2.check_guard(text)


@pytest.mark.parametrize("text,ok", [
    ("torch.ops.aten.conv2d.default", True), ("torch.ops.aten.mul.Tensor", True), ("_operator.getitem", False),
    ("_operator.mul", True), ("math.trunc", True), ("torch.sym_float", True), ("torch.ops.higher_order.cond", True),
    ("torch.ops.higher_order.call_torchbind", False), ("torch.os.system", False), ("torch.load", False),
    ("torch.ops.load_library.__call__.x", False), ("torch.ops.import_module.x.y", False),
    ("torch.ops.aten.conv2d.__class__", False), ("torch.ops.aten.conv2d.op", False), ("#ns:op", False),
    ("torch.ops.aten._dir.x", False), ("builtins.eval", False),
])
def test_operator_allowlist(text, ok):
    if ok:
        _pt2.check_operator(text)
    else:
        with pytest.raises(_ExprError):
            _pt2.check_operator(text)


# ----------------------------------------------------------------------------- real archives still load


def _decisions(analysis) -> list[tuple]:
    return [(s.id, s.mul, s.conv, s.decision, s.reason_codes) for s in analysis.sites]


def _round_trip(model: nn.Module, inputs: tuple, path: Path, **export_kw) -> None:
    _save(model, inputs, path, **export_kw)
    program = _pt2.load_pt2(path)
    assert program.example_inputs is not None
    from_file = inspector.analyze(str(path), stage="aten")
    from_module = inspector.analyze(model, example_inputs=inputs, stage="aten")
    assert _decisions(from_file) == _decisions(from_module)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "generated_blocks" else n
                                  for n in sample_models.names()])  # slow: the 200-site sample (make check leaves it out)
def test_every_sample_round_trips(tmp_path, name):
    """Every sample, the blocks shaped like real networks (BatchNorm, depthwise, SE, NF-ResNet,
    ConvNeXt) among them, saved by torch.export.save, loads and gets the same decisions."""
    model = sample_models.get(name).eval()
    _round_trip(model, tuple(model.example_inputs()), tmp_path / f"{name}.pt2")


def test_dynamic_shapes_round_trip(tmp_path):
    model = ConvMul().eval()
    inputs = (torch.randn(2, 3, 16, 16),)
    path = tmp_path / "dynamic.pt2"
    _round_trip(model, inputs, path, dynamic_shapes={"x": {0: torch.export.Dim("batch", min=1, max=64)}})
    doc = json.loads(_members(path)[_key(_members(path), "models/model.json")])
    assert doc["range_constraints"] and "Symbol(" in json.dumps(doc["graph_module"]["graph"]["tensor_values"])
    program = _pt2.load_pt2(path)
    out = program.module()(torch.randn(5, 3, 16, 16))
    assert out.shape == (5, 4, 16, 16)


class _Guarded(nn.Module):
    """Derived dims, data-dependent guards, floor division and interpolation: real size expressions and guards."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Conv2d(3, 4, 3, stride=2, padding=1)

    def forward(self, x, y):
        z = self.conv(x) * 0.5
        w = z.reshape(z.shape[0], -1).sum(1)
        half = nn.functional.interpolate(x, scale_factor=0.5)
        if x.shape[0] > 2:
            w = w * 2
        return w, torch.cat([x, y], 0).mean(), half, x[: x.shape[0] // 2 + 1]


def test_programs_with_guards_and_derived_dims_round_trip(tmp_path):
    auto = torch.export.Dim.AUTO
    inputs = (torch.randn(4, 3, 16, 16), torch.randn(8, 3, 16, 16))
    program = torch.export.export(_Guarded().eval(), inputs, dynamic_shapes={"x": {0: auto, 2: auto, 3: auto},
                                                                           "y": {0: auto, 2: auto, 3: auto}})
    path = tmp_path / "guarded.pt2"
    torch.export.save(program, path)
    doc = json.loads(_members(path)[_key(_members(path), "models/model.json")])
    assert doc["guards_code"], "the program must carry guards for this test to mean something"
    loaded = _pt2.load_pt2(path)
    module = loaded.module()
    torch.testing.assert_close(module(*inputs), program.module()(*inputs))
