"""The public API is typed: mypy passes on the package, parity and a usage probe, and every
public function has a written-out, fully annotated signature."""

import dataclasses
import importlib.resources
import inspect
import pathlib
import subprocess
import sys

import pytest

import jaxpool
import jaxpool.shapes

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_passes_on_package_parity_and_usage_probe():
    # The files and per-module settings are pyproject.toml's [tool.mypy]; the probe
    # (tests/typing_usage.py) pins the return types users see, overloads included.
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


def _public_functions():
    for name in jaxpool.__all__:
        obj = getattr(jaxpool, name)
        if inspect.isfunction(obj):
            yield f"jaxpool.{name}", obj
    for name, obj in vars(jaxpool.shapes).items():
        if (inspect.isfunction(obj) and not name.startswith("_")
                and obj.__module__ == "jaxpool.shapes"):
            yield f"jaxpool.shapes.{name}", obj


@pytest.mark.parametrize("name, function", list(_public_functions()),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_public_function_is_fully_annotated(name, function):
    signature = inspect.signature(function)
    missing = [p.name for p in signature.parameters.values()
               if p.annotation is inspect.Parameter.empty]
    assert not missing, f"{name}: parameters without a type: {missing}"
    assert signature.return_annotation is not inspect.Signature.empty, f"{name}: no return type"
    assert function.__doc__ and "Args:" in function.__doc__ and "Returns:" in function.__doc__, \
        f"{name}: the docstring needs Args and Returns sections"


@pytest.mark.parametrize("framework", ["linen", "nnx", "equinox"])
def test_module_fields_are_typed(framework):
    module = pytest.importorskip(f"jaxpool.{framework}")
    classes = [c for c in vars(module).values()
               if inspect.isclass(c) and c.__module__ == module.__name__
               and not c.__name__.startswith("_")]
    for cls in classes:
        fields = [f for f in dataclasses.fields(cls) if f.name not in ("parent", "name")]
        assert fields or cls.__name__.startswith("Global"), cls
        for field in fields:
            assert field.type is not inspect.Parameter.empty and field.type != "Any", \
                (cls, field.name)


def test_py_typed_ships_with_the_package():
    assert importlib.resources.files("jaxpool").joinpath("py.typed").is_file()
