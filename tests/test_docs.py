"""The documentation: the Sphinx build passes with warnings as errors and documents every
public name, and every example in the docstrings and the guide runs: the ``>>>`` examples
print what they say, and every ``.. code-block:: python`` of a page runs on its own in a
fresh process, as a reader would copy it. Shell blocks name real scripts and modules;
``literalinclude`` shows the examples' own code, which ``tests/test_examples.py`` runs."""

import doctest
import importlib
import importlib.util
import inspect
import os
import pathlib
import pkgutil
import re
import textwrap
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpool
import jaxpool.shapes
from default_share import default_share
from fresh_process import ScriptRunner

pytest.importorskip("flax")
parity = pytest.importorskip("parity")

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# What the examples may use without importing it.
NAMESPACE = {"jax": jax, "jnp": jnp, "np": np, "jaxpool": jaxpool}


@pytest.fixture(scope="module")
def html(tmp_path_factory):
    # `python -m sphinx`'s own entry point, in this process: a new interpreter's imports
    # of sphinx, jaxpool, parity and flax took about a third of the build.
    import sphinx.pycode
    from sphinx.cmd.build import build_main

    out = tmp_path_factory.mktemp("docs")
    log = out / "warnings.txt"
    with warnings.catch_warnings():
        # Sphinx's own deprecations (napoleon's use of autodoc), which its command line
        # does not show either: a warning of the build itself still fails it (-W).
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        code = build_main(["-W", "--keep-going", "-q", "-w", str(log), "-b", "html",
                           "-d", str(out / "doctrees"), str(DOCS), str(out / "html")])
    # The module analysers' cache keeps its errors' tracebacks, and through them the
    # build's documents: dropped, as the build's own process would have been.
    sphinx.pycode.ModuleAnalyzer.cache.clear()
    assert code == 0, (f"sphinx exited {code} (an error's traceback is in the captured "
                       f"stderr):\n" + (log.read_text() if log.exists() else ""))
    return out / "html"


def _public_names():
    """Every public name, as ``(page, dotted name)``."""
    for name in jaxpool.__all__:
        if inspect.isfunction(getattr(jaxpool, name)):
            yield "api", f"jaxpool.{name}"
    for framework in ("linen", "nnx", "equinox"):
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
             ("index", "api", "linen", "nnx", "equinox", "shapes", "parity")}
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


# --- the guide's code blocks ------------------------------------------------------------------

DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block::[ \t]*(?P<language>\S*)[ \t]*$")
LANGUAGES = {"python", "bash", "text"}  # python runs; bash is checked for real commands


def code_blocks(text: str) -> list[tuple[int, str, str]]:
    """(line of the directive, language, code) of every ``.. code-block::`` of a page."""
    lines, blocks = text.splitlines(), []
    for number, line in enumerate(lines):
        match = DIRECTIVE.match(line)
        if not match:
            continue
        indent, body, i = len(match["indent"]), [], number + 1
        while i < len(lines) and lines[i].strip().startswith(":"):  # the directive's options
            i += 1
        while i < len(lines) and (not lines[i].strip()
                                  or len(lines[i]) - len(lines[i].lstrip()) > indent):
            body.append(lines[i])
            i += 1
        blocks.append((number + 1, match["language"], textwrap.dedent("\n".join(body)).strip()
                       + "\n"))
    return blocks


def _page_blocks(language: str, every: int = 1) -> tuple[list, list[str]]:
    """The blocks in ``language`` of every page, and their ids: of each page's blocks, the
    default run takes every ``every``-th (see default_share), the others run under -m slow."""
    blocks, ids = [], []
    for page in sorted(DOCS.glob("*.rst")):
        found = [(line, code) for line, lang, code in code_blocks(page.read_text())
                 if lang == language]
        blocks += default_share([code for _, code in found], every)
        ids += [f"docs/{page.name}:{line}" for line, _ in found]
    return blocks, ids


def test_code_blocks_are_found_as_written():
    text = ("Intro.\n\n.. code-block:: python\n   :caption: x\n\n   import a\n\n   b = 1\n"
            "\nText.\n\n  .. code-block:: bash\n\n     ls\n")
    assert code_blocks(text) == [(3, "python", "import a\n\nb = 1\n"), (12, "bash", "ls\n")]


def test_every_code_block_is_of_a_checked_kind():
    odd = []
    for page in sorted(DOCS.glob("*.rst")):
        text = page.read_text()
        odd += [f"{page.name}:{line} {lang!r}" for line, lang, _ in code_blocks(text)
                if lang not in LANGUAGES]
        # a bare ``::`` literal block or another code directive would not be run
        odd += [f"{page.name}:{n + 1} {line.strip()!r}"
                for n, line in enumerate(text.splitlines())
                if (line.rstrip().endswith("::") and not line.lstrip().startswith(".."))
                or re.match(r"\s*\.\. (code|sourcecode)::", line)]
    assert not odd, f"code blocks that the tests would not run: {odd}"


# A python block runs in a process of its own and compiles anew what it calls (3-20 s of
# CPU each): by default every page runs every second of its blocks, its first among them,
# so that every page's blocks are run; every block under -m slow.
PYTHON_BLOCKS, PYTHON_IDS = _page_blocks("python", every=2)


def test_the_guide_has_python_blocks():
    assert len(PYTHON_BLOCKS) >= 3, "no python code blocks found: has the directive changed?"


@pytest.fixture(scope="module")
def run_block():
    """Each block in a fresh process, forked from one that has imported the packages the
    blocks share (see fresh_process): importing jax, torch and flax anew took most of a
    block's seconds."""
    runner = ScriptRunner({**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"})
    yield runner
    runner.close()


@pytest.mark.parametrize("code", PYTHON_BLOCKS, ids=PYTHON_IDS)
def test_python_block_runs_on_its_own(code, tmp_path, run_block):
    if "jaxpool.torchax" in code and importlib.util.find_spec("torchax") is None:
        pytest.skip("torchax is not installed")
    script = tmp_path / "block.py"
    script.write_text(code)
    returncode = run_block(str(script))
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 0, (
        f"the block fails when run on its own:\n{code}\n--- stderr ---\n{stderr[-3000:]}")


def _module_exists(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return (path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()
            or importlib.util.find_spec(name.split(".")[0]) is not None)


SHELL_BLOCKS, SHELL_IDS = _page_blocks("bash")


@pytest.mark.parametrize("code", SHELL_BLOCKS, ids=SHELL_IDS)
def test_shell_blocks_name_real_scripts_and_modules(code):
    scripts = re.findall(r"python (?:-\S+ )*(\S+\.py)", code)
    modules = re.findall(r"python -m (\S+)", code)
    missing = [s for s in scripts if not (ROOT / s).is_file()]
    missing += [m for m in modules if not _module_exists(m)]
    assert not missing, f"shell commands that name nothing in the repository: {missing}"
