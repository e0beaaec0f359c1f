"""One entry per op: every public function has a spec (jaxpool.registry), and everything that
describes an op again (shape rules, modules, torchax's table, parity's suite, the docs'
tables, torch's OpInfo catalog) agrees with it."""

from __future__ import annotations

import inspect
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
import jaxpool.linen
import jaxpool.nnx
from jaxpool import _modules, halo_jit, registry

ROOT = pathlib.Path(__file__).resolve().parents[1]
SPECS = registry.SPECS


def _public_functions() -> dict[str, object]:
    return {name: getattr(jaxpool, name) for name in jaxpool.__all__
            if inspect.isfunction(getattr(jaxpool, name, None))}


def test_every_public_function_has_a_spec_and_every_spec_a_public_name():
    functions = _public_functions()
    for name, function in functions.items():
        # aliases (max_pool = max_pool2d) are the spec'd function itself
        assert function.__name__ in SPECS, f"jaxpool.{name} has no spec"
        assert registry.FUNCTIONS[function.__name__] is function
    assert set(SPECS) <= set(functions), set(SPECS) - set(functions)


# where an op copies a reference's positional order, that order: Hugging Face's and mmcv's
# multi_scale_deformable_attention take the levels' shapes between the arrays, and the
# variants the reference lacks (RT-DETRv2's) by name only
_REFERENCE_ORDER = {
    "multi_scale_deformable_attention": (
        ("value", "spatial_shapes", "sampling_locations", "attention_weights"),
        {"mode", "points_per_level"}),
    # torchvision's deform_conv2d takes the mask last, after the convolution's options
    "deform_conv2d": (("input", "offset", "weight", "bias", "stride", "padding", "dilation",
                       "mask"), set()),
}


@pytest.mark.parametrize("name", list(SPECS))
def test_the_function_takes_its_arrays_first_then_the_options_by_name(name):
    spec = SPECS[name]
    parameters = list(inspect.signature(registry.FUNCTIONS[name]).parameters.values())
    leading, variants = _REFERENCE_ORDER.get(name, (spec.arrays, set()))
    assert tuple(p.name for p in parameters[:len(leading)]) == leading
    assert tuple(p for p in leading if p in spec.arrays) == spec.arrays
    keyword_only = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY}
    # the layout and the mesh axes by name only, where the op takes them
    assert keyword_only <= {"channels_last", "axis_names", "key"} | variants
    assert ("axis_names" in keyword_only) == (spec.halo not in ("replicate",)), spec.halo
    assert spec.family and spec.halo in registry.HALO_RULES


@pytest.mark.parametrize("name", list(SPECS))
def test_every_op_has_a_shape_rule_with_its_arguments(name):
    spec = SPECS[name]
    rule = vars(jaxpool.shapes)[name]  # written out, not derived
    function = registry.FUNCTIONS[name]
    # (return_indices, a fractional pool's samples and key change no shape; the samples'
    # shape is the rule's samples_shape)
    expected = [p for p in inspect.signature(function).parameters
                if p not in spec.arrays
                and p not in ("axis_names", "return_indices", "samples", "key")]
    got = [p for p in inspect.signature(rule).parameters if not p.endswith("_shape")]
    assert got == expected


@pytest.mark.parametrize("name", list(SPECS))
def test_every_module_is_described_once_and_on_both_frameworks(name):
    function = registry.FUNCTIONS[name]
    parameters = set(inspect.signature(function).parameters)
    for module in SPECS[name].modules:
        description = _modules.DESCRIPTIONS[module]
        assert issubclass(getattr(jaxpool.linen, module), description)
        assert issubclass(getattr(jaxpool.nnx, module), description)
        fields = {f.name for f in __import__("dataclasses").fields(description)}
        # torch.nn's names: a field is an argument of the function, or the padding
        # modules' ``padding`` (F.pad's ``pad``), or MultiScaleRoIAlign's ``featmap_names``
        # (which of the call's maps it pools)
        assert fields - parameters <= {"padding", "value", "featmap_names"}, (
            module, fields - parameters)


def test_torchax_lowers_every_aten_name_of_every_spec():
    torchax = pytest.importorskip("jaxpool.torchax")
    import torch

    lowered = {op.torch_op for op in torchax.OPS}
    for spec in SPECS.values():
        for name in spec.aten:
            assert getattr(torch.ops.aten, name).default in lowered, (spec.name, name)
    named = {name for spec in SPECS.values() for name in spec.aten}
    for op in lowered:
        if isinstance(op, torch._ops.OpOverload):
            assert op.overloadpacket.__name__ in named, op


def test_the_parity_suite_checks_every_spec_with_its_arguments():
    from parity.suite import cases
    from parity.suite.ops import _KEYWORD_ARRAYS, OPS

    # every op but those that call another with some arguments fixed (upsample_*)
    assert set(OPS) == {n for n, s in SPECS.items() if s.halo != "delegate"}
    for name, op in OPS.items():
        # the RoI ops' boxes go to both sides by keyword (parity.suite.ops._KEYWORD_ARRAYS)
        assert op.arrays == len(SPECS[name].arrays) - len(_KEYWORD_ARRAYS.get(name, ()))
        assert cases.quick_cases(ops=[name]), (
            f"{name} has no argument sets in parity/suite/cases/")


@pytest.mark.parametrize("page", ["README.md", "docs/api.rst"])
def test_the_docs_name_every_op(page):
    text = (ROOT / page).read_text()
    for name, spec in SPECS.items():
        # a family may be named once: ``avg_pool1d/2d/3d``, ``fractional_max_pool2d/3d``
        assert name in text or any(f"{spec.family}{ranks}" in text
                                   for ranks in ("1d/2d/3d", "2d/3d")), \
            f"{page} does not name {name}"


@pytest.mark.parametrize("name", list(SPECS))
def test_every_torch_twin_exists(name):
    import importlib

    dotted = SPECS[name].torch
    if dotted is None:
        return
    module, _, attribute = dotted.rpartition(".")
    assert callable(getattr(importlib.import_module(module), attribute))


def test_every_opinfo_name_is_in_torchs_catalog():
    pytest.importorskip("expecttest")
    from torch.testing._internal.common_methods_invocations import op_db

    names = {info.name for info in op_db}
    for spec in SPECS.values():
        for entry in spec.opinfo:
            assert entry in names, (spec.name, entry)


def test_a_spec_is_registered_once_under_its_functions_name():
    spec = registry.Spec("avg_pool2d", "avg_pool", lambda *a: None)
    with pytest.raises(ValueError, match="registered twice"):
        registry.op(spec)(registry.FUNCTIONS["avg_pool2d"])
    with pytest.raises(ValueError, match="decorates"):
        registry.op(registry.Spec("not_an_op", "x", lambda *a: None))(jaxpool.pad)
    with pytest.raises(ValueError, match="halo"):
        registry.Spec("x", "x", lambda *a: None, halo="sideways")


def test_the_partitioned_primitive_passes_every_argument_by_name():
    """Under halo_jit's primitive the op is called again from its parameters: by name, so
    a parameter's place in the signature cannot misroute it."""
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 3, 9, 8)))
    calls = [
        lambda x: jaxpool.avg_pool2d(x, 3, padding=1, count_include_pad=False),
        lambda x: jaxpool.max_pool2d(x, (3, 2), 2, 1, 1, True, return_indices=True)[1],
        lambda x: jaxpool.pad(x, (1, 2, 0, 1), "reflect"),
        lambda x: jaxpool.interpolate(x, scale_factor=2, mode="bilinear",
                                      align_corners=True),
    ]
    for call in calls:
        with halo_jit.route("never"):
            expected = jax.jit(call)(x)
        with halo_jit.route("always"):
            got = jax.jit(call)(x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(expected))
