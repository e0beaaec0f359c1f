"""Every ```python block of README.md runs as written, each on its own in a fresh process
(a reader copies one snippet, not the page, so each must carry its own imports and data):
forked from one that has imported the packages the snippets share (see fresh_process)."""

import os
import pathlib
import re

import pytest
from fresh_process import ScriptRunner

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(line number of the opening fence, code) of every ```python block."""
    return [(text.count("\n", 0, match.start()) + 1, match.group(1))
            for match in FENCE.finditer(text)]


BLOCKS = python_blocks(README.read_text())


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3, "no ```python blocks found: has the README's fence style changed?"


def test_blocks_are_found_as_written():
    text = "intro\n```python\nimport a\n```\n```bash\nls\n```\n```python\nb = 1\n\nc = 2\n```\n"
    assert python_blocks(text) == [(2, "import a\n"), (8, "b = 1\n\nc = 2\n")]


@pytest.fixture(scope="module")
def run_script():
    runner = ScriptRunner({**os.environ, "JAX_PLATFORMS": "cpu", "MPLBACKEND": "Agg"})
    yield runner
    runner.close()


@pytest.mark.parametrize("line,code", BLOCKS, ids=[f"README.md:{line}" for line, _ in BLOCKS])
def test_snippet_runs_on_its_own(line, code, tmp_path, run_script):
    script = tmp_path / f"readme_line_{line}.py"
    script.write_text(code)
    returncode = run_script(script)
    stderr = (tmp_path / "stderr").read_text()
    assert returncode == 0, (
        f"the snippet at README.md:{line} fails when run on its own:\n{code}\n"
        f"--- stderr ---\n{stderr[-3000:]}")
