"""The schema walker: every field of the archive's JSON, checked against torch's own schema.

The model JSON and the payload configs are parsed (with a nesting cap) and walked along the
dataclasses in ``torch._export.serde.schema``: unknown fields are refused, and every string that
torch would evaluate, import, resolve by name or paste into generated code goes through a rule
(size expressions and guards through their grammars, operator targets and pytree specs through
the allowlists here). The payload configs are also held to the tensor members they point at.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import keyword
import math
import re
import types
import typing
from typing import Any

import torch

from ..._base.errors import first_line
from ._common import (_DOTTED_RE, _SAFE_TEXT_RE, MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_NAME_CHARS, _ExprError, _key_ok,
                      _q, _Refusal, is_name, is_path)
from ._guards import check_guard
from ._sizes import check_expression

# ----------------------------------------------------------------------------- JSON


def _parse_json(data: bytes, rel: str) -> Any:
    try:
        value = json.loads(data.decode("utf-8"))  # exactly what torch does with these bytes
    except RecursionError:
        raise _Refusal(f"JSON nested deeper than {MAX_JSON_DEPTH} levels", rel) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise _Refusal(f"not valid JSON: {_q(first_line(exc))}", rel) from None
    _check_depth(value, rel)
    return value


def _check_depth(value: Any, rel: str, limit: int = MAX_JSON_DEPTH) -> None:
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise _Refusal(f"JSON nested deeper than {limit} levels", rel)
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)


def _json_text(text: str, what: str, rel: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """Parse a JSON string nested in a JSON field (treespecs, custom metadata)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _Refusal(f"{what} nested deeper than {limit} levels", rel) from None
    except ValueError:
        raise _Refusal(f"{what} {_q(text)} is not valid JSON", rel) from None
    _check_depth(value, rel, limit)
    return value


# ----------------------------------------------------------------------------- operators

_HOP_ALLOWED = frozenset({
    "cond", "while_loop", "map_impl", "scan", "associative_scan", "wrap_with_set_grad_enabled",
    "wrap_with_autocast", "auto_functionalized", "auto_functionalized_v2", "run_const_graph",
    "invoke_subgraph", "hints_wrapper",
})


@typing.no_type_check
def _sym_op_names() -> frozenset[str]:
    # lazy: torch's private serde names, looked up when an archive is read
    from torch._export.serde.serialize import _SYM_OPS

    return frozenset(f"{op.__module__}.{op.__name__}" for op in _SYM_OPS)


_SYM_OP_NAMES: frozenset[str] | None = None


def check_operator(text: Any) -> None:
    """Raise ``_ExprError`` unless ``text`` names an ATen-style op overload, an allowed
    higher-order op, or one of the symbolic-size operators torch serializes by name.

    torch resolves a target by getattr from the ``torch`` module, so an unchecked target could
    name any function reachable from it."""
    global _SYM_OP_NAMES
    if _SYM_OP_NAMES is None:
        _SYM_OP_NAMES = _sym_op_names()
    if not isinstance(text, str) or len(text) > MAX_NAME_CHARS:
        raise _ExprError("not a string")
    if text in _SYM_OP_NAMES:
        return
    parts = text.split(".")
    if len(parts) < 4 or parts[:2] != ["torch", "ops"] or not all(p.isidentifier() and not p.startswith("__") for p in parts):
        raise _ExprError("not an operator torch.export writes")
    ops = torch.ops
    if parts[2] == "higher_order":
        if len(parts) != 4 or parts[3] not in _HOP_ALLOWED:
            raise _ExprError("not an allowed higher-order operator")
        if not isinstance(getattr(ops.higher_order, parts[3], None), torch._ops.HigherOrderOperator):
            raise _ExprError("not a higher-order operator")
        return
    if len(parts) != 5:
        raise _ExprError("not an operator overload (torch.ops.NAMESPACE.OP.OVERLOAD)")
    ns_name, op_name, overload = parts[2:]
    if hasattr(type(ops), ns_name) or (ns_name in vars(ops) and not isinstance(vars(ops)[ns_name], torch._ops._OpNamespace)):
        raise _ExprError("not an operator namespace")
    namespace = getattr(ops, ns_name)
    if not isinstance(namespace, torch._ops._OpNamespace) or hasattr(type(namespace), op_name):
        raise _ExprError("not an operator namespace")
    try:
        packet = getattr(namespace, op_name)
    except AttributeError:
        return  # not registered here: torch refuses it without calling anything
    except Exception:  # noqa: BLE001 - whatever a crafted name makes torch raise: refused
        raise _ExprError("not an operator") from None
    if not isinstance(packet, torch._ops.OpOverloadPacket) or hasattr(type(packet), overload):
        raise _ExprError("not an operator")
    try:
        target = getattr(packet, overload)
    except AttributeError:
        return
    except Exception:  # noqa: BLE001 - whatever a crafted name makes torch raise: refused
        raise _ExprError("not an operator overload") from None
    if not isinstance(target, torch._ops.OpOverload):
        raise _ExprError("not an operator overload")


# ----------------------------------------------------------------------------- pytree specs

_TREE_TYPES = frozenset({
    "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict", "collections.deque",
    "collections.namedtuple", "collections.defaultdict", "torch.fx.immutable_collections.immutable_list",
    "torch.fx.immutable_collections.immutable_dict", "torch.Size",
})
_DICT_TYPES = frozenset({"builtins.dict", "collections.OrderedDict", "torch.fx.immutable_collections.immutable_dict"})
_DEFAULT_FACTORIES = frozenset({"list", "dict", "set", "int", "float", "str", "tuple", "bool"})


def check_treespec(text: Any, rel: str, *, kwargs_are_names: bool) -> None:
    """Raise ``_Refusal`` unless ``text`` is a pytree spec of builtin and torch containers whose
    contexts are plain keys (no enum or factory that torch would import by module name)."""
    if not isinstance(text, str) or len(text) > MAX_JSON_BYTES:
        raise _Refusal("a pytree spec that is not a string", rel)
    spec = _json_text(text, "pytree spec", rel)
    if not (isinstance(spec, list) and len(spec) == 2 and spec[0] == 1):
        raise _Refusal(f"pytree spec {_q(text)} is not protocol 1", rel)
    top = spec[1]
    _check_tree_node(top, rel)
    if kwargs_are_names and isinstance(top, dict) and top.get("type") == "builtins.tuple":
        children = top.get("children_spec") or []
        if len(children) == 2 and children[1].get("type") == "builtins.dict":
            for key in json.loads(children[1]["context"]):
                if not is_name(key):
                    raise _Refusal(f"keyword argument name {_q(key)} is not a Python identifier (it reaches generated code)", rel)


def _check_tree_node(node: Any, rel: str) -> None:
    stack = [node]
    while stack:
        node = stack.pop()
        if not (isinstance(node, dict) and set(node) == {"type", "context", "children_spec"}
                and isinstance(node["children_spec"], list)):
            raise _Refusal(f"malformed pytree spec node {_q(json.dumps(node))}", rel)
        typ, context = node["type"], node["context"]
        if typ is None:
            if context is not None or node["children_spec"]:
                raise _Refusal("malformed pytree leaf", rel)
            continue
        if typ not in _TREE_TYPES:
            raise _Refusal(f"pytree type {_q(typ)} is not a builtin or torch container "
                           "(torch would look it up or import it)", rel)
        if typ == "collections.namedtuple":
            if not (isinstance(context, str) and _DOTTED_RE.fullmatch(context)):
                raise _Refusal(f"namedtuple type name {_q(context)} is not a dotted name", rel)
        elif typ == "collections.defaultdict":
            ok = (isinstance(context, dict) and set(context) == {"default_factory_module", "default_factory_name", "dict_context"}
                  and context["default_factory_module"] == "builtins"
                  and context["default_factory_name"] in _DEFAULT_FACTORIES
                  and isinstance(context["dict_context"], list) and all(map(_key_ok, context["dict_context"])))
            if not ok:
                raise _Refusal(f"defaultdict factory {_q(json.dumps(context))} is not a builtin "
                               "(torch would import its module)", rel)
        else:
            if not isinstance(context, str):
                raise _Refusal(f"pytree context {_q(context)} is not a JSON string", rel)
            value = _json_text(context, "pytree context", rel, limit=3)
            if typ in _DICT_TYPES:
                if not (isinstance(value, list) and all(map(_key_ok, value))):
                    raise _Refusal(f"dict keys {_q(context)} are not plain names or integers "
                                   "(an enum key makes torch import a module)", rel)
            elif not (value is None or (isinstance(value, int) and not isinstance(value, bool))):
                raise _Refusal(f"pytree context {_q(context)} is not plain (only keys, lengths or null are written)", rel)
        stack.extend(node["children_spec"])


# ----------------------------------------------------------------------------- the schema walk


_MAX_INT64 = 2**63 - 1


def _unwrap_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


class _Walker:
    """Walks a parsed JSON document against torch's schema dataclasses (torch._export.serde.schema),
    refusing unknown fields and applying a rule to every string that torch could eval, import,
    resolve or paste into generated code."""

    _hints_cache: dict[type, dict[str, Any]] = {}

    def __init__(self, rel: str) -> None:
        from torch._export.serde import schema  # lazy: torch's private serde names, looked up when an archive is read

        self.schema = schema
        self.rel = rel
        self.graph_depth = 0

    # -- entry points

    def check_program(self, doc: Any) -> None:
        self.walk(doc, self.schema.ExportedProgram, "program")

    def check_payload_config(self, doc: Any, folder: str, tensor_sizes: dict[str, int]) -> None:
        # lazy: torch's private serde names, looked up when an archive is read
        from torch._export.serde.serialize import _SERIALIZE_TO_TORCH_DTYPE

        self.walk(doc, self.schema.PayloadConfig, "config")
        prefix = "weight_" if folder == "data/weights/" else "tensor_"
        for fqn, meta in doc.get("config", {}).items():
            if meta.get("use_pickle"):
                self.refuse(f"{_q(fqn)} is stored as a pickle, which could run code")
            path_name = meta.get("path_name")
            rel = folder + str(path_name)
            if not (isinstance(path_name, str) and path_name.startswith(prefix) and rel in tensor_sizes):
                self.refuse(f"{_q(fqn)} points at {_q(path_name)}, which is not a tensor member of the archive")
            tm = meta.get("tensor_meta")
            if not isinstance(tm, dict):
                self.refuse(f"{_q(fqn)} has no tensor metadata")
            dtype = _SERIALIZE_TO_TORCH_DTYPE.get(tm.get("dtype"))
            if dtype is None:
                self.refuse(f"{_q(fqn)} has an unknown dtype")
            sizes = [s.get("as_int") for s in tm.get("sizes", [])]
            strides = [s.get("as_int") for s in tm.get("strides", [])]
            offset = (tm.get("storage_offset") or {}).get("as_int", 0)
            ints = [*sizes, *strides, offset]
            if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in ints) or len(sizes) != len(strides):
                self.refuse(f"{_q(fqn)} has sizes, strides or offset that are not plain non-negative integers")
            if max(ints) > _MAX_INT64:  # torch holds them in int64; a 4,300-digit one would not even print
                self.refuse(f"{_q(fqn)} has a size, stride or offset over 2**63 - 1")
            element = dtype.itemsize
            numel = math.prod(sizes)
            extent = 0 if numel == 0 else (offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1) * element
            available = tensor_sizes[rel]
            if extent > available or (available == 0 and numel != 0):
                self.refuse(f"{_q(fqn)} claims {extent} bytes but its member holds {available} "
                            "(torch would allocate what the JSON claims)")

    # -- helpers

    def refuse(self, reason: str) -> typing.NoReturn:
        raise _Refusal(reason, self.rel)

    def hints(self, cls: type) -> dict[str, Any]:
        hints = self._hints_cache.get(cls)
        if hints is None:
            hints = typing.get_type_hints(cls)
            self._hints_cache[cls] = hints
        return hints

    def walk(self, value: Any, tp: Any, where: str) -> None:
        tp, optional = _unwrap_optional(tp)
        if value is None:
            if optional:
                return
            self.refuse(f"{where} is null")
        origin = typing.get_origin(tp)
        if tp is str:
            if not isinstance(value, str):
                self.refuse(f"{where} is not a string")
        elif tp is bool:
            if not isinstance(value, bool):
                self.refuse(f"{where} is not a boolean")
        elif tp is int:
            if not isinstance(value, int) or isinstance(value, bool):
                self.refuse(f"{where} is not an integer")
        elif tp is float:
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not is_number and value not in ("Infinity", "-Infinity", "NaN"):
                self.refuse(f"{where} is not a number")
        elif isinstance(tp, type) and issubclass(tp, enum.Enum):
            if not isinstance(value, int) or isinstance(value, bool) or value not in {e.value for e in tp}:
                self.refuse(f"{where} is not a valid {tp.__name__}")
        elif origin is list:
            if not isinstance(value, list):
                self.refuse(f"{where} is not a list")
            (item,) = typing.get_args(tp)
            for i, v in enumerate(value):
                self.walk(v, item, f"{where}[{i}]")
        elif origin is dict:
            if not isinstance(value, dict):
                self.refuse(f"{where} is not an object")
            _key_tp, item = typing.get_args(tp)
            for k, v in value.items():
                self.walk(v, item, f"{where}.{k}")
        elif dataclasses.is_dataclass(tp):
            self.walk_dataclass(value, tp, where)
        else:  # pragma: no cover - a schema type this walker does not know
            self.refuse(f"{where} has a type this loader does not know ({tp!r})")

    def walk_dataclass(self, value: Any, cls: type, where: str) -> None:
        if not isinstance(value, dict):
            self.refuse(f"{where} is not an object")
        name = cls.__name__
        hints = self.hints(cls)
        unknown = [k for k in value if k not in hints]
        if unknown:
            self.refuse(f"{where} has unknown field {_q(unknown[0])}")
        if issubclass(cls, self.schema._Union) and len(value) != 1:
            self.refuse(f"{where} must set exactly one of its fields")
        if name in ("CustomObjArgument", "InputToCustomObjSpec"):
            self.refuse("custom (TorchScript) objects are pickles that could run code")
        if name == "Graph":
            self.graph_depth += 1
            if self.graph_depth > 8:
                self.refuse("graphs nested more than 8 levels deep")
        for field, field_tp in hints.items():
            if field in value:
                self.walk(value[field], field_tp, f"{where}.{field}")
        if name == "Graph":
            self.graph_depth -= 1
        rule = getattr(self, f"rule_{name}", None)
        if rule is not None:  # after the fields, so every field already has its schema type
            rule(value, where)

    def name(self, value: Any, what: str) -> None:
        if not is_name(value):
            self.refuse(f"{what} {_q(value)} is not a Python identifier (it reaches generated code)")

    def path(self, value: Any, what: str) -> None:
        if not is_path(value):
            self.refuse(f"{what} {_q(value)} is not a dotted path of Python identifiers (it reaches generated code)")

    def safe_text(self, value: Any, what: str) -> None:
        if not (isinstance(value, str) and _SAFE_TEXT_RE.fullmatch(value)):
            self.refuse(f"{what} {_q(value)} holds quotes, backslashes or control characters (it reaches generated code)")

    # -- rules per schema class (rule_<ClassName>(value, where))

    def rule_SymExpr(self, v: dict, where: str) -> None:
        text = v.get("expr_str")
        try:
            check_expression(text)
        except _ExprError:
            self.refuse(f"size expression {_q(text)} is not a plain size expression (could run code)")

    def rule_SymIntArgument(self, v: dict, where: str) -> None:
        if "as_name" in v:
            self.name(v["as_name"], "symbol value name")

    rule_SymFloatArgument = rule_SymIntArgument
    rule_SymBoolArgument = rule_SymIntArgument

    def rule_TensorArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "tensor name")

    def rule_TokenArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "token name")

    def rule_GraphArgument(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "subgraph name")

    def rule_Argument(self, v: dict, where: str) -> None:
        if "as_operator" in v:
            self.operator(v["as_operator"])
        if "as_string_to_argument" in v and isinstance(v["as_string_to_argument"], dict):
            for key in v["as_string_to_argument"]:
                if not _key_ok(key):
                    self.refuse(f"argument key {_q(key)} is not a plain name")

    def rule_NamedArgument(self, v: dict, where: str) -> None:
        name = v.get("name")
        if not (name == "" or (isinstance(name, str) and name.isidentifier() and len(name) <= MAX_NAME_CHARS)):
            self.refuse(f"argument name {_q(name)} is not a Python identifier (it reaches generated code)")

    def operator(self, text: Any) -> None:
        try:
            check_operator(text)
        except _ExprError as exc:
            self.refuse(f"operator {_q(text)} is {exc} (torch would resolve it by name)")

    def rule_Node(self, v: dict, where: str) -> None:
        self.operator(v.get("target"))
        if v.get("name") not in (None, ""):
            self.name(v["name"], "node name")
        if v.get("target", "").startswith("torch.ops.higher_order."):
            for arg in v.get("inputs") or []:
                if isinstance(arg, dict) and keyword.iskeyword(arg.get("name", "")):
                    self.refuse(f"keyword argument {_q(arg.get('name'))} of a higher-order operator is a Python keyword")
        metadata = v.get("metadata")
        if isinstance(metadata, dict):
            self.node_metadata(metadata)

    def node_metadata(self, meta: dict) -> None:
        for key, text in meta.items():
            if not isinstance(text, str):
                self.refuse(f"node metadata {_q(key)} is not a string")
            if key in ("custom", "from_node"):
                _json_text(text, f"node metadata {key!r}", self.rel)
            elif key == "nn_module_stack":
                for item in text.split(";"):
                    parts = _metadata_split(item)
                    if parts is None or not (parts[1] == "" or is_path(parts[1])):
                        self.refuse(f"module path in nn_module_stack {_q(item)} is not a dotted path of identifiers")
            elif key == "source_fn_stack":
                for item in text.split(";"):
                    parts = item.split(",")
                    if len(parts) != 2 or not _DOTTED_RE.fullmatch(parts[1]):
                        self.refuse(f"source_fn_stack entry {_q(item)} is not 'name,dotted.path' (torch resolves it by name)")

    def rule_Graph(self, v: dict, where: str) -> None:
        for field in ("tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values"):
            for key in (v.get(field) or {}):
                self.name(key, "value name")
        if v.get("custom_obj_values"):
            self.refuse("custom (TorchScript) objects are pickles that could run code")
        for arg in v.get("inputs") or []:
            if isinstance(arg, dict) and "as_string" in arg:
                self.safe_text(arg["as_string"], "constant string input")

    def rule_InputToConstantInputSpec(self, v: dict, where: str) -> None:
        self.name(v.get("name"), "constant input name")
        value = v.get("value")
        if isinstance(value, dict) and "as_string" in value:
            self.safe_text(value["as_string"], "constant string input")

    def rule_InputToParameterSpec(self, v: dict, where: str) -> None:
        self.path(v.get("parameter_name"), "parameter name")

    def rule_InputToBufferSpec(self, v: dict, where: str) -> None:
        self.path(v.get("buffer_name"), "buffer name")

    def rule_InputToTensorConstantSpec(self, v: dict, where: str) -> None:
        self.path(v.get("tensor_constant_name"), "constant name")

    rule_BufferMutationSpec = rule_InputToBufferSpec
    rule_ParameterMutationSpec = rule_InputToParameterSpec
    rule_GradientToParameterSpec = rule_InputToParameterSpec

    def rule_GradientToUserInputSpec(self, v: dict, where: str) -> None:
        self.name(v.get("user_input_name"), "user input name")

    rule_UserInputMutationSpec = rule_GradientToUserInputSpec

    def rule_ModuleCallSignature(self, v: dict, where: str) -> None:
        check_treespec(v.get("in_spec"), self.rel, kwargs_are_names=True)
        check_treespec(v.get("out_spec"), self.rel, kwargs_are_names=False)
        for arg_name in v.get("forward_arg_names") or []:
            self.name(arg_name, "forward argument name")

    def rule_ModuleCallEntry(self, v: dict, where: str) -> None:
        fqn = v.get("fqn")
        if fqn != "":
            self.path(fqn, "module path")

    def rule_NamedTupleDef(self, v: dict, where: str) -> None:
        for field_name in v.get("field_names") or []:
            self.name(field_name, "namedtuple field name")

    def rule_GraphModule(self, v: dict, where: str) -> None:
        meta = v.get("metadata") or {}
        if isinstance(meta, dict) and isinstance(meta.get("custom"), str):
            _json_text(meta["custom"], "program metadata 'custom'", self.rel)
        for type_name in (v.get("treespec_namedtuple_fields") or {}):
            if not _DOTTED_RE.fullmatch(type_name):
                self.refuse(f"namedtuple type name {_q(type_name)} is not a dotted name")

    def rule_Device(self, v: dict, where: str) -> None:
        if not (isinstance(v.get("type"), str) and re.fullmatch(r"[a-z_]{1,32}", v["type"])):
            self.refuse(f"device type {_q(v.get('type'))} is not a device name")

    def rule_PayloadConfig(self, v: dict, where: str) -> None:
        for fqn in (v.get("config") or {}):
            self.path(fqn, "state dict name")

    def rule_ExportedProgram(self, v: dict, where: str) -> None:
        for key in (v.get("opset_version") or {}):
            self.name(key, "opset name")
        for key, rng in (v.get("range_constraints") or {}).items():
            try:
                check_expression(key)
            except _ExprError:
                self.refuse(f"range constraint {_q(key)} is not a plain size expression")
            if isinstance(rng, dict):
                for bound in ("min_val", "max_val"):
                    b = rng.get(bound)
                    if b is not None and (not isinstance(b, int) or isinstance(b, bool)):
                        self.refuse(f"range constraint bound {_q(b)} is not an integer (it reaches generated code)")
        for verifier in v.get("verifiers") or []:
            if not (isinstance(verifier, str) and re.fullmatch(r"[A-Z_]{0,32}", verifier)):
                self.refuse(f"verifier {_q(verifier)} is not a dialect name")
        version = v.get("torch_version")
        if version is not None and not (isinstance(version, str) and _SAFE_TEXT_RE.fullmatch(version) and len(version) < 100):
            self.refuse(f"torch_version {_q(version)} is not a version string")
        for guard in v.get("guards_code") or []:
            try:
                check_guard(guard)
            except _ExprError:
                self.refuse(f"guard {_q(guard)} is not a plain shape guard (torch compiles it into code)")


def _metadata_split(item: str) -> list[str] | None:
    """torch's split of one nn_module_stack entry "key,path,type" (commas inside brackets kept)."""
    out, start, depth = [], 0, 0
    for end, c in enumerate(item):
        if c in "[(":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif c == "," and depth == 0:
            out.append(item[start:end])
            start = end + 1
    out.append(item[start:])
    return out if len(out) == 3 else None
