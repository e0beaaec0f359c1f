"""parity's cases (``parity/suite/cases/``): one file per op family, every op covered, and
roi_align's cases run against torchvision's algorithm in torch where torchvision is
absent."""

import importlib

import pytest
import torch
from torch.nn.modules.utils import _pair

from jaxpool import registry
from parity.suite import cases, ops

_TABLES = ("MAIN", "EXTRA", "DEFAULT", "FULL", "VALUES_ONLY", "ERRORS", "DRAWN")


def _family(op: str) -> str:
    """The folder of jaxpool that defines ``op``: ``pooling`` for avg_pool2d."""
    return registry.FUNCTIONS[op].__module__.split(".")[1]


def test_every_op_has_cases_in_its_family_file_or_a_stated_reason():
    for name, spec in registry.SPECS.items():
        if spec.halo == "delegate":
            # upsample_*: the op they call, with some arguments fixed, has the cases
            assert name not in ops.OPS and name not in cases.MAIN, name
            continue
        assert name in ops.OPS, name
        family = importlib.import_module(f"parity.suite.cases.{_family(name)}")
        assert family.MAIN.get(name), f"{name}: no argument sets in {family.__name__}"
        assert name in family.ERRORS, f"{name}: no bad calls in {family.__name__}"
        assert cases.quick_cases([name]), name
    # where an op cannot be checked here, the suite says why
    assert all(isinstance(why, str) and why for why in cases.unchecked().values())
    assert set(cases.unchecked()) <= {"roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool"}


def test_one_case_file_per_family_and_no_stale_names():
    assert {f.__name__.rsplit(".", 1)[1] for f in cases.FAMILIES} == {
        _family(op) for op in ops.OPS}
    for family in cases.FAMILIES:
        for table in _TABLES:
            for op in getattr(family, table, {}):
                assert op in ops.OPS and _family(op) == family.__name__.rsplit(".", 1)[1], (
                    family.__name__, table, op)
    for op, i in cases.CHEAPER:
        assert i < len(cases.MAIN[op] + cases.EXTRA.get(op, [])), (op, i)


class _SpecWithoutCases:
    """A spec as the registry holds it once the specs carry no argument sets."""

    def __init__(self, spec):
        self._spec = spec

    def __getattr__(self, name):
        if name in ("samples", "errors"):
            raise AttributeError(f"Spec has no {name}")
        return getattr(self._spec, name)


def test_the_suite_reads_no_cases_from_the_specs(monkeypatch):
    before = [c.key for c in cases.quick_cases()]
    monkeypatch.setattr(registry, "SPECS", {n: _SpecWithoutCases(s)
                                            for n, s in registry.SPECS.items()})
    monkeypatch.setattr(ops, "OPS", ops._ops())
    monkeypatch.setattr(cases, "OPS", ops.OPS)
    assert [c.key for c in cases.quick_cases()] == before
    assert len(cases.full_cases()) > 3000
    for op in ops.OPS:
        cases.error_cases(op)


# --- roi_align, against torchvision's algorithm in torch ----------------------------------

def _torchvision_in_torch(input, boxes, output_size, spatial_scale=1.0, sampling_ratio=-1,
                          aligned=False):
    """``torchvision.ops.roi_align``'s signature and checks (its Python shape check, its
    operator's schema and floating-point dispatch) around the tests' reference of its CPU
    kernel."""
    from test_roi_align import torch_roi_align

    if isinstance(boxes, (list, tuple)):  # torchvision's convert_boxes_to_roi_format
        boxes = torch.cat([torch.cat([torch.full_like(b[:, :1], i), b], dim=1)
                           for i, b in enumerate(boxes)])
    if boxes.size(1) != 5:
        raise AssertionError("The boxes tensor shape is not correct as Tensor[K, 5]")
    if not isinstance(spatial_scale, float) or not isinstance(sampling_ratio, int):
        raise TypeError("roi_align(): arguments of the wrong type")
    if not input.is_floating_point() or input.dtype != boxes.dtype:
        raise RuntimeError("roi_align_forward_kernel: not implemented for this dtype")
    return torch_roi_align(input, boxes, spatial_scale, _pair(output_size), sampling_ratio,
                           aligned)


@pytest.fixture
def torchvision_in_torch(monkeypatch):
    monkeypatch.setitem(ops._OPTIONAL_TWINS, "roi_align",
                        ("torchvision", lambda: _torchvision_in_torch))
    monkeypatch.setattr(ops, "_loaded", {})


_ROI = cases.quick_cases(["roi_align"])


@pytest.mark.parametrize("case", [
    case if i < 2 or isinstance(case, cases.ErrorCase)
    else pytest.param(case, marks=pytest.mark.slow)
    for i, case in enumerate(_ROI)], ids=[case.key for case in _ROI])
def test_roi_align_cases_pass_against_torchvisions_algorithm(torchvision_in_torch, case):
    """Each case, to its derivative order, through the twin parity builds from
    torchvision's forward and backward; the bad calls raise on both sides."""
    assert cases.unchecked(["roi_align"]) == {}
    res = cases.run_case(case)
    assert res.ok, res.report.format(failures_only=True)
    if isinstance(case, cases.Case):
        assert [r.name for r in res.report.rows][-1] == f"d{case.orders} forward"


def test_roi_align_cases_hold_every_kind_of_argument():
    sets = cases.MAIN["roi_align"] + cases.EXTRA["roi_align"]
    kwargs = [kw for _, kw, _ in sets]
    assert {kw.get("aligned", False) for kw in kwargs} == {False, True}
    assert {kw["sampling_ratio"] > 0 for kw in kwargs} == {False, True}
    assert {kw.get("spatial_scale", 1.0) for kw in kwargs} >= {0.25, 0.5, 1.0, 2.0}
    formats = {len(shapes) == 1 and shapes[0][1] == 5 for _, _, shapes in sets}
    assert formats == {True, False}  # a [K, 5] array and a list of [L_i, 4]
    derivative = [c for c in _ROI if isinstance(c, cases.Case)]
    assert {c.dtype for c in derivative} == set(cases.DTYPES)
    assert {c.layout for c in derivative} == {"first", "last"}


def test_roi_align_boxes_are_concrete_exact_and_name_their_images():
    for case in cases.full_cases(["roi_align"]):
        if not isinstance(case, cases.Case):
            continue
        boxes = case.drawn()["boxes"]
        listed = isinstance(boxes, list)
        rows = [b.astype(float) for b in boxes] if listed else [boxes.astype(float)]
        assert all(b.dtype == case.numpy_dtype for b in (boxes if listed else [boxes]))
        if listed:
            assert [b.shape for b in boxes] == list(case.shapes)
        else:
            assert boxes.shape == case.shapes[0]
            assert set(boxes[:, 0].astype(float)) <= set(range(case.shape[0]))
        scale = dict(case.kwargs).get("spatial_scale", 1.0)
        for b in rows:  # quarter pixels of the map: exact in bfloat16
            corners = b[:, -4:] * scale * 4
            assert (corners == corners.round()).all(), case.key
        assert case.inputs()[0].shape[0] == case.shape[0]
