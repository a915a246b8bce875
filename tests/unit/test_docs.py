"""The README's two commands and CI stay in step."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _readme_commands():
    text = open(os.path.join(ROOT, "README.md")).read()
    blocks = re.findall(r"```bash\n(.*?)```", text, re.S)
    return [line for block in blocks[:2] for line in block.splitlines()
            if line and not line.startswith("#")]


def test_readme_opens_with_two_commands():
    demo, tests = _readme_commands()
    assert "fuseoptrun -np 2" in demo and "pip install" in demo
    assert "pytest" in tests and "pip install" in tests


def test_ci_runs_the_readme_test_command():
    ci = open(os.path.join(ROOT, ".ci", "run")).read()
    assert _readme_commands()[1] in ci.splitlines()
