"""The one door to ExecuTorch internals that may move between releases.

Everything the inspector needs from ``executorch`` (the fold pass, the Arm pass
manager module whose name lookup we swap, the quantizer, constant lookup) is
imported lazily here, so importing ``inspector`` stays cheap and a missing or
moved piece fails with one clear message.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from .errors import InspectorError

_INSTALL = "pip install executorch==1.5.1 (see pyproject.toml)"


def _import(module: str) -> ModuleType:
    import importlib

    from ._quiet import quiet_imports

    try:
        with quiet_imports():  # torchao logs optional CUDA kernels and pytree deprecations at import
            return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise InspectorError(f"cannot import {module} ({exc}); install it with: {_INSTALL}") from None


@functools.cache
def fold_pass_class() -> type:
    """The installed ``FoldScalarMulIntoConvPass`` class (never a wrapper)."""
    mod = _import("executorch.backends.arm._passes.fold_scalar_mul_into_conv_pass")
    return mod.FoldScalarMulIntoConvPass


def pass_manager_module() -> ModuleType:
    """The module whose global ``FoldScalarMulIntoConvPass`` the Arm pass manager instantiates."""
    return _import("executorch.backends.arm._passes.arm_pass_manager")


def disallow_tfa_key() -> str:
    """The node-meta key with which the quantizer opts nodes out of transform-for-annotation."""
    return _import("executorch.backends.arm.constants").DISALLOW_TFA_META_KEY


def get_param_tensor(program: Any, node: Any):
    """A constant's tensor as the Arm passes read it from an exported program (raises RuntimeError)."""
    return _import("executorch.backends.arm._passes.arm_pass_utils").get_param_tensor(program, node)


def tosa_compile_spec(spec: str = "TOSA-1.0+INT"):
    """A ``TosaCompileSpec`` for ``spec``."""
    return _import("executorch.backends.arm.tosa.compile_spec").TosaCompileSpec(spec)


def symmetric_quantization_config(per_channel: bool = True):
    """The Arm backend's symmetric int8 quantization config."""
    return _import("executorch.backends.arm.quantizer").get_symmetric_quantization_config(is_per_channel=per_channel)


def tosa_int_quantizer(spec: str = "TOSA-1.0+INT", config=None):
    """A ``TOSAQuantizer`` for ``spec`` with a global config (default: symmetric int8, per-channel).

    Without a global config the quantizer marks every node disallowed for
    transform-for-annotation, and nothing folds there.
    """
    quantizer = _import("executorch.backends.arm.quantizer").TOSAQuantizer(tosa_compile_spec(spec))
    quantizer.set_global(config if config is not None else symmetric_quantization_config())
    return quantizer


def to_edge(program: Any):
    """``executorch.exir.to_edge`` on an exported program; returns the edge ``ExportedProgram``."""
    return _import("executorch.exir").to_edge(program).exported_program()
