"""Built-in sample models, each teaching one behaviour of FoldScalarMulIntoConvPass.

``names()`` lists them; ``get(name)`` builds one with fixed weights. Every model
has ``example_inputs()`` and ``expected(stage, rule)``.
"""

from __future__ import annotations

from ._base import SampleModel
from . import models as _models
from . import generated as _generated
from . import networks as _networks
from . import digits as _digits
from . import silero as _silero

_SAMPLES: dict[str, type[SampleModel]] = {
    "conv_mul_channel_scale": _models.ConvMulChannelScale,
    "conv_mul_scalar": _models.ConvMulScalar,
    "conv_mul_multiple_users": _models.ConvMulMultipleUsers,
    "conv_mul_width_scale": _models.ConvMulWidthScale,
    "conv_mul_wide_dynamic_range_scale": _models.ConvMulWideDynamicRangeScale,
    "stateful_conv_mul": _models.StatefulConvMul,
    "functional_recurrent_conv_mul": _models.FunctionalRecurrentConvMul,
    "conv1d_mul": _models.Conv1dMul,
    "conv_transpose_mul": _models.ConvTransposeMul,
    "conv_mul_chain": _models.ConvMulChain,
    "conv_mul_input_scale": _models.ConvMulInputScale,
    "shared_conv_mul": _models.SharedConvMul,
    "conv_bn_mul": _models.ConvBatchNormMul,
    "stateful_wide_scale": _models.StatefulWideScale,
    "conv_view_scale": _models.ConvViewScale,
    # blocks shaped like real networks
    "resnet_basic_block": _networks.ResNetBasicBlock,
    "mobilenetv2_inverted_residual": _networks.MobileNetV2InvertedResidual,
    "squeeze_excitation": _networks.SqueezeExcitation,
    "nf_resnet_block": _networks.NFResNetBlock,
    "convnext_block": _networks.ConvNeXtBlock,
    "nfnet_block": _networks.NFNetBlock,
    "streaming_keyword_spotter": _networks.StreamingKeywordSpotter,
    # trained networks (docs/real-networks.md)
    "digits_layerscale": _digits.DigitsLayerScale,
    "digits_stateful": _digits.DigitsStateful,
    "silero_vad": _silero.SileroVad,
    # big graphs
    "generated_blocks": _generated.GeneratedBlocks,
}

DEFAULT = "stateful_conv_mul"

__all__ = ["DEFAULT", "SampleModel", "describe", "get", "names", "register"]


def names() -> list[str]:
    """The sample names, in teaching order."""
    return list(_SAMPLES)


def get(name: str) -> SampleModel:
    """A fresh instance of sample ``name`` (fixed weights; same on every call)."""
    try:
        return _SAMPLES[name]()
    except KeyError:
        raise KeyError(f"unknown sample {name!r}; known samples: {', '.join(_SAMPLES)}") from None


def describe(name: str) -> str:
    """The first line of the sample's docstring, as plain text (reST ``code`` shown as `code`)."""
    return (_SAMPLES[name].__doc__ or "").strip().splitlines()[0].replace("``", "`")


def register(add) -> None:
    """Entry point of the ``fold_inspector.samples`` group: hand every sample to the inspector's registry."""
    for name, cls in _SAMPLES.items():
        add(name, cls, describe(name), default=name == DEFAULT)
