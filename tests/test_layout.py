"""The layout the code promises (docs/adding_an_op.rst): each op's public function is a real
``def`` in its family's ``functions.py``, its checks and plan take typed keywords, plans
are plain Python, and a warning points at the user's line however deep the call."""

import ast
import inspect
import pathlib
import warnings

import jax
import jax.numpy as jnp
import pytest

import jaxpool
from jaxpool import registry

ROOT = pathlib.Path(jaxpool.__file__).parent
FAMILIES = sorted(p.name for p in ROOT.iterdir()
                  if p.is_dir() and (p / "functions.py").exists())
OPS = sorted(registry.SPECS)


def test_every_family_has_its_three_layers():
    assert FAMILIES, ROOT
    for family in FAMILIES:
        for layer in ("functions.py", "plan.py", "kernel.py"):
            assert (ROOT / family / layer).exists(), f"{family}/{layer}"


@pytest.mark.parametrize("name", OPS)
def test_public_function_is_a_def_in_its_family(name):
    function = registry.FUNCTIONS[name]
    source = pathlib.Path(inspect.getsourcefile(function))
    assert source.name == "functions.py" and source.parent.name in FAMILIES, source
    tree = ast.parse(source.read_text())
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
    assert defs, f"no `def {name}` in {source}"
    assert function.__code__.co_filename == str(source)


@pytest.mark.parametrize("name", OPS)
def test_prepare_takes_the_arguments_as_typed_keywords(name):
    spec = registry.SPECS[name]
    function = registry.FUNCTIONS[name]
    given = [p for p in inspect.signature(function).parameters if p not in spec.arrays]
    parameters = list(inspect.signature(spec.prepare).parameters.values())
    assert parameters[0].name == "spec"
    positional = [p.name for p in parameters[1:] if p.kind is p.POSITIONAL_OR_KEYWORD]
    keywords = {p.name: p for p in parameters if p.kind is p.KEYWORD_ONLY}
    assert len(positional) == len(spec.arrays), (positional, spec.arrays)
    assert not [p for p in parameters if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert set(given) | {"axis_names"} == set(keywords), (given, sorted(keywords))
    untyped = [k for k, p in keywords.items() if p.annotation is inspect.Parameter.empty]
    assert not untyped, untyped
    source = pathlib.Path(inspect.getsourcefile(spec.prepare))
    assert source == pathlib.Path(inspect.getsourcefile(function))


def _imports(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("family", FAMILIES)
def test_plans_are_plain_python(family):
    for path in [ROOT / family / "plan.py", *(ROOT / family).glob("windows.py")]:
        jax_imports = {m for m in _imports(path) if m == "jax" or m.startswith("jax.")}
        assert not jax_imports, f"{path.relative_to(ROOT)} imports {jax_imports}"


def test_core_knows_no_family():
    for path in (ROOT / "core").glob("*.py"):
        crossing = {m for m in _imports(path)
                    if m.startswith("jaxpool.") and not m.startswith("jaxpool.core")}
        assert not crossing, f"core/{path.name} imports {crossing}"


def _affine_grid_without_align_corners(theta):
    return jaxpool.affine_grid(theta, (1, 1, 3, 3))  # the line the warning must name


def _wrapped_once_more(theta):
    return _affine_grid_without_align_corners(theta)


def _one_more_frame_inside_jaxpool(monkeypatch):
    """``registry.run`` called through one more function whose frame is jaxpool's (compiled
    under a jaxpool file name): the frame an internal refactoring would add."""
    namespace = {"run": registry.run}
    code = compile("def run_again(name, args):\n    return run(name, args)\n",
                   str(ROOT / "registry.py"), "exec")
    exec(code, namespace)
    monkeypatch.setattr(registry, "run", namespace["run_again"])


@pytest.mark.parametrize("call", ["direct", "wrapped", "jit", "grid_sample", "deeper inside"])
def test_warning_points_at_the_users_line(call, monkeypatch):
    theta = jnp.zeros((1, 2, 3))
    if call == "deeper inside":
        _one_more_frame_inside_jaxpool(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if call in ("direct", "deeper inside"):
            line = inspect.currentframe().f_lineno + 1
            jaxpool.affine_grid(theta, (1, 1, 3, 3))
        elif call == "wrapped":
            line = _affine_grid_without_align_corners.__code__.co_firstlineno + 1
            _wrapped_once_more(theta)
        elif call == "jit":
            line = _affine_grid_without_align_corners.__code__.co_firstlineno + 1
            jax.jit(_affine_grid_without_align_corners)(theta)
        else:
            line = inspect.currentframe().f_lineno + 1
            jaxpool.grid_sample(jnp.ones((1, 1, 3, 3)), jnp.zeros((1, 2, 2, 2)))
    ours = [w for w in caught if "align_corners" in str(w.message)]
    assert ours, [str(w.message) for w in caught]
    assert (ours[0].filename, ours[0].lineno) == (__file__, line)
