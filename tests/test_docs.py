"""The tutorial and the README example run as written (the docs build is its own CI step)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_tutorial_code_blocks_run_in_order():
    text = (ROOT / "docs" / "tutorial.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert len(blocks) >= 5
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, "docs/tutorial.md", "exec"), namespace)  # noqa: S102
    assert namespace["trace"].value.shape == (64, 3)


def test_readme_example_runs_and_makes_progress():
    text = (ROOT / "README.md").read_text()
    (block,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    namespace: dict = {}
    exec(compile(block, "README.md", "exec"), namespace)  # noqa: S102
    loss, params, batch = namespace["loss"], namespace["params"], namespace["batch"]
    assert float(loss(params, batch)) < 1e-2 * float(loss(0 * params, batch))
