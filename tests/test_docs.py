"""The documentation: the Sphinx build passes with warnings as errors and documents every
public name, and every example in the docstrings and the guide runs and prints what it says."""

import doctest
import importlib
import inspect
import pathlib
import pkgutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
import jaxpool.shapes

pytest.importorskip("flax")
parity = pytest.importorskip("parity")

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# What the examples may use without importing it.
NAMESPACE = {"jax": jax, "jnp": jnp, "np": np, "jaxpool": jaxpool}


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    out = tmp_path_factory.mktemp("docs")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         "-d", str(out / "doctrees"), str(DOCS), str(out / "html")],
        cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return out / "html"


def _public_names():
    """Every public name, as ``(page, dotted name)``."""
    for name in jaxpool.__all__:
        if inspect.isfunction(getattr(jaxpool, name)):
            yield "api", f"jaxpool.{name}"
    for framework in ("linen", "nnx"):
        module = importlib.import_module(f"jaxpool.{framework}")
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and obj.__module__ == module.__name__ and name[0] != "_":
                yield framework, f"jaxpool.{framework}.{name}"
    for name, obj in vars(jaxpool.shapes).items():
        if inspect.isfunction(obj) and obj.__module__ == "jaxpool.shapes" and name[0] != "_":
            yield "shapes", f"jaxpool.shapes.{name}"
    for name in parity.__all__:
        yield "parity", f"parity.{name}"


def test_docs_build_with_warnings_as_errors_and_document_every_public_name(html):
    pages = {page: (html / f"{page}.html").read_text() for page in
             ("index", "api", "linen", "nnx", "shapes", "parity")}
    missing = [name for page, name in _public_names() if f'id="{name}"' not in pages[page]]
    assert not missing, f"public names without an entry in the API reference: {missing}"


def _examples():
    """Every docstring with an example in jaxpool and parity, and every page of the guide."""
    finder, seen = doctest.DocTestFinder(), set()
    for package in (jaxpool, parity):
        names = [package.__name__] + [info.name for info in pkgutil.walk_packages(
            package.__path__, f"{package.__name__}.")]
        for name in names:
            if name.endswith("__main__"):
                continue
            for test in finder.find(importlib.import_module(name), globs=NAMESPACE):
                # The Flax classes show their description's docstring: run it once.
                if test.examples and test.docstring not in seen:
                    seen.add(test.docstring)
                    yield pytest.param(test, id=test.name)
    parser = doctest.DocTestParser()
    for page in sorted(DOCS.glob("*.rst")):
        text = page.read_text()
        if parser.get_examples(text):
            yield pytest.param(parser.get_doctest(text, dict(NAMESPACE), page.name, str(page), 0),
                               id=f"docs/{page.name}")


@pytest.mark.parametrize("test", list(_examples()))
def test_example_runs_and_prints_what_it_shows(test):
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)


def test_examples_cover_every_public_function():
    examples = {case.values[0].name for case in _examples()}
    without = [f"jaxpool.{name}" for name in jaxpool.__all__
               if inspect.isfunction(getattr(jaxpool, name))
               and f"{getattr(jaxpool, name).__module__}.{getattr(jaxpool, name).__name__}"
               not in examples]
    assert not without, f"public functions without an example in their docstring: {without}"
