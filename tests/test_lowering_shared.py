"""The lowering's shared work done once (inspector/_doors/decompositions.py, used by the TOSA door's ``lower``).

What a lowering produces with the shortcut is ExecuTorch's own, byte for byte: the reference here is
``to_edge_transform_and_lower`` called directly, ExecuTorch alone, never the inspector's code path. Around it, torch
is left as it was (its functions, its operators' kernel tables, a user's own ``run_decompositions``), a listing of
CompositeImplicitAutograd operators sees an operator registered or destroyed since the last one, and where the
shortcut's assumptions do not hold it binds nothing.
"""

from __future__ import annotations

import copy
import gc
import importlib

import pytest
import torch

import sample_models
from inspector._doors import decompositions as _decompositions, tosa as _tosa

# (sample, accelerator): the INT flow on tosa-int and two Ethos-U targets, the FP flow on tosa-fp.
CASES = (("conv_mul_scalar", "tosa-int"), ("stateful_conv_mul", "ethos-u55-128"),
         ("resnet_basic_block", "ethos-u85-256"), ("conv1d_mul", "tosa-fp"))


def _program(name: str, accelerator: str):
    """ExecuTorch's own flow up to the lowering, ExecuTorch alone: (program to lower, TOSA specification, Ethos-U
    compile spec or None)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, TOSAQuantizer, get_symmetric_quantization_config
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    model = sample_models.get(name)
    inputs = model.example_inputs()
    program = torch.export.export(copy.deepcopy(model), copy.deepcopy(inputs))
    if accelerator == "tosa-fp":
        return program, "TOSA-1.0+FP", None
    ethos = None
    if accelerator == "tosa-int":
        spec = "TOSA-1.0+INT"
        quantizer = TOSAQuantizer(TosaCompileSpec(spec))
    else:
        ethos = EthosUCompileSpec(accelerator)
        spec = str(ethos.tosa_spec)
        quantizer = EthosUQuantizer(ethos)
    quantizer.set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(program.module(check_guards=False), quantizer)
    with torch.no_grad():
        prepared(*copy.deepcopy(inputs))
    return torch.export.export(convert_pt2e(prepared), copy.deepcopy(inputs)), spec, ethos


def _executorch_lower(program, spec: str):
    """ExecuTorch's own call, nothing of the inspector around it."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(copy.deepcopy(program), partitioner=[TOSAPartitioner(TosaCompileSpec(spec))])


def _delegates(edge) -> list[bytes]:
    """The TOSA flatbuffer of every delegate of the lowered program."""
    from executorch.exir.lowered_backend_module import get_lowered_backend_modules

    return [bytes(m.processed_bytes) for m in get_lowered_backend_modules(edge.exported_program().graph_module)]


def _pte(edge) -> bytes:
    return bytes(edge.to_executorch().buffer)


def test_the_shortcut_applies_to_this_torch():
    """The shortcut is keyed on torch's sources only (the same torch 2.13.0 under executorch 1.4.0 to 1.5.1): on
    the installed torch every assumption holds, and the status says so. A torch whose sources differ gets the
    status that says which one does not hold (the tests below), and no shortcut."""
    state = _decompositions.status()
    assert state.active, state.reason
    assert f"torch {torch.__version__}" in state.reason
    assert {module.split(".")[0] for module, _ in _decompositions.VERIFIED} == {"torch"}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "accelerator"), CASES)
def test_the_lowering_is_executorchs_own_byte_for_byte(name, accelerator):
    """The inspector's lowering (the shortcut, the provenance shared, the collector paused) writes the same TOSA
    flatbuffer and the same .pte as ExecuTorch's own to_edge_transform_and_lower on the same program."""
    program, spec, _ = _program(name, accelerator)
    reference = _executorch_lower(program, spec)
    lowered = _tosa.lower(copy.deepcopy(program), spec)
    assert _delegates(reference) and _delegates(lowered) == _delegates(reference)
    assert _pte(lowered) == _pte(reference)


@pytest.mark.slow
def test_an_ethos_u_pte_with_vela_is_executorchs_own():
    """ExecuTorch's own Ethos-U lowering (its partitioner, Vela's command stream in the .pte) inside the shortcut's
    scope writes the same .pte as without it."""
    from executorch.backends.arm.ethosu import EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    program, _, ethos = _program("conv_mul_channel_scale", "ethos-u55-128")
    reference = _pte(to_edge_transform_and_lower(copy.deepcopy(program), partitioner=[EthosUPartitioner(ethos)]))
    with _decompositions.shared_decompositions() as state:
        assert state.active
        shared = _pte(to_edge_transform_and_lower(copy.deepcopy(program), partitioner=[EthosUPartitioner(ethos)]))
    assert shared == reference


# ---------------------------------------------------------------- torch left as it was


def _torch_bindings() -> dict[str, object]:
    utils = importlib.import_module("torch._export.utils")
    found = {f"{m}._collect_all_valid_cia_ops": importlib.import_module(m)._collect_all_valid_cia_ops
             for m in _decompositions._LISTING_USERS}
    found["_materialize_cpp_cia_ops"] = utils._materialize_cpp_cia_ops
    found["OperatorBase.py_impl"] = torch._ops.OperatorBase.__dict__["py_impl"]
    return found


def _kernel_tables() -> dict:
    """Every preservable CIA operator's Python kernels (key -> the very function) and its fake-tensor rule."""
    from torch._export.utils import _collect_all_valid_cia_ops
    from torch._subclasses import fake_impls

    return {op: (dict(op.py_kernels), fake_impls.op_implementations_dict.get(op)) for op in _collect_all_valid_cia_ops()}


class _UsesCompositeOps(torch.nn.Module):
    def forward(self, x):  # linear, layer_norm, gelu(approximate='tanh') and dropout are CompositeImplicitAutograd
        y = torch.nn.functional.linear(x, torch.ones(8, 8))
        y = torch.nn.functional.layer_norm(y, (8,))
        return torch.nn.functional.dropout(torch.nn.functional.gelu(y, approximate="tanh"), 0.0, False)


def _users_decompositions() -> tuple[str, ...]:
    program = torch.export.export(_UsesCompositeOps(), (torch.randn(2, 8),))
    preserved = torch.export.default_decompositions()
    del preserved[torch.ops.aten.linear.default]
    return tuple(str(p.graph) + str(p.graph_signature) for p in (
        program.run_decompositions(), program.run_decompositions({}), program.run_decompositions(preserved)))


@pytest.mark.slow
def test_torch_is_left_as_it_was():
    """After a lowering through the shortcut: torch's functions are its own again, every operator's kernel table
    holds the same functions, the collector is on, and a user's own run_decompositions (the core ATen table, none,
    one op preserved) gives the same programs as before."""
    program, spec, _ = _program("conv_mul_scalar", "tosa-int")
    _executorch_lower(program, spec)  # what torch keeps of its own lowering is in the state compared
    bindings, tables, users = _torch_bindings(), _kernel_tables(), _users_decompositions()
    assert gc.isenabled()
    _tosa.lower(copy.deepcopy(program), spec)
    assert _torch_bindings() == bindings
    assert _kernel_tables() == tables
    assert gc.isenabled()
    assert _users_decompositions() == users


def test_inside_the_scope_torch_is_bound_and_outside_it_is_not():
    """The scope binds the listing, the materialisation and py_impl (nested scopes share one binding), and the last
    scope to close puts torch's own back."""
    before = _torch_bindings()
    with _decompositions.shared_decompositions():
        inside = _torch_bindings()
        with _decompositions.shared_decompositions():
            assert _torch_bindings() == inside
        assert _torch_bindings() == inside
    assert all(inside[k] is not before[k] for k in before)
    assert _torch_bindings() == before


# ---------------------------------------------------------------- the listing is never stale


def _listing() -> frozenset:
    """torch's listing as bound now (the scope's inside a scope)."""
    return frozenset(importlib.import_module("torch._export.utils")._collect_all_valid_cia_ops())


def _define_composite_op(lib_name: str) -> torch.library.Library:
    lib = torch.library.Library(lib_name, "DEF")
    lib.define("twice(Tensor x) -> Tensor")
    lib.impl("twice", lambda x: x + x, "CompositeImplicitAutograd")
    return lib


def test_a_listing_sees_what_was_registered_or_destroyed_since_the_last():
    """An operator registered, destroyed and registered again under the same name between listings is listed
    inside the scope exactly as torch lists it outside: nothing is kept from one listing to the next."""
    with _decompositions.shared_decompositions():
        first = _listing()
    assert first == _listing()
    lib = _define_composite_op("inspector_shared_test")
    try:
        with _decompositions.shared_decompositions():
            added = _listing()
        assert added == _listing() and len(added - first) == 1
        (op,) = added - first
        assert op.name() == "inspector_shared_test::twice"
    finally:
        lib._destroy()
    with _decompositions.shared_decompositions():
        removed = _listing()
    assert removed == _listing() == first
    lib = _define_composite_op("inspector_shared_test")
    try:
        with _decompositions.shared_decompositions():
            again = _listing()
        assert again == _listing() and {o.name() for o in again - first} == {"inspector_shared_test::twice"}
        # destroyed and defined again with no listing between: the dispatcher's registrations read as they did at
        # the last listing, but torch.ops lost the operator, which only a materialisation puts back
        lib._destroy()
        lib = _define_composite_op("inspector_shared_test")
        with _decompositions.shared_decompositions():
            back = _listing()
        assert {o.name() for o in back - first} == {"inspector_shared_test::twice"} and back == _listing()
    finally:
        lib._destroy()


def test_a_kept_registration_closure_checks_as_a_new_one():
    """py_impl's kept closure registers on the operator it was made for and refuses a second kernel on the same
    key, as torch's own new closure does."""
    op = torch.ops.aten.linear.default
    key = torch._C.DispatchKey.CPU
    assert key not in op.py_kernels

    def kernel(*args, **kwargs):
        return NotImplemented

    saved = dict(op.py_kernels)
    try:
        with _decompositions.shared_decompositions():
            for _ in range(2):
                op.py_impl(key)(kernel)
                assert op.py_kernels[key] is kernel
                with pytest.raises(RuntimeError, match="override a python impl"):
                    op.py_impl(key)(kernel)
                del op.py_kernels[key]
                op._dispatch_cache.clear()
    finally:
        op.py_kernels.clear()
        op.py_kernels.update(saved)
        op._dispatch_cache.clear()


# ---------------------------------------------------------------- where the assumptions do not hold


def test_a_torch_with_other_sources_gets_no_shortcut(monkeypatch):
    """A function whose source is not the one verified (here: torch's materialisation replaced by another) turns
    the shortcut off for the process, with a line naming it; the scope then binds nothing."""
    utils = importlib.import_module("torch._export.utils")
    original = utils._materialize_cpp_cia_ops

    def _materialize_cpp_cia_ops() -> None:  # what a later torch might do differently
        original()

    monkeypatch.setattr(utils, "_materialize_cpp_cia_ops", _materialize_cpp_cia_ops)
    _decompositions.clear_status()
    try:
        state = _decompositions.status()
        assert not state.active
        assert "torch._export.utils._materialize_cpp_cia_ops" in state.reason and "not the source verified" in state.reason
        before = _torch_bindings()
        with _decompositions.shared_decompositions() as inside:
            assert inside == state
            assert _torch_bindings() == before
    finally:
        monkeypatch.undo()
        _decompositions.clear_status()
    assert _decompositions.status().active


def test_a_listing_imported_elsewhere_gets_no_shortcut(monkeypatch):
    """torch.export calling a listing of its own (not torch._export.utils' by name) turns the shortcut off."""
    exported_program = importlib.import_module("torch.export.exported_program")
    monkeypatch.setattr(exported_program, "_collect_all_valid_cia_ops", lambda: set())
    _decompositions.clear_status()
    try:
        state = _decompositions.status()
        assert not state.active and "torch.export.exported_program" in state.reason
    finally:
        monkeypatch.undo()
        _decompositions.clear_status()


def test_a_function_wrapped_after_the_check_is_called_as_it_is(monkeypatch):
    """Another tool wrapping one of torch's functions after the check: the scope binds nothing, so the wrapper runs
    every time, never skipped."""
    assert _decompositions.status().active
    utils = importlib.import_module("torch._export.utils")
    original, calls = utils._materialize_cpp_cia_ops, []

    def counting():
        calls.append(1)
        return original()

    monkeypatch.setattr(utils, "_materialize_cpp_cia_ops", counting)
    with _decompositions.shared_decompositions():
        assert utils._materialize_cpp_cia_ops is counting
        utils._collect_all_valid_cia_ops()
    assert len(calls) > 1  # once per namespace, as torch calls it
