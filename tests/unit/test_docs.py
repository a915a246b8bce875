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


MAX_CELL = 160  # characters: a README table a newcomer reads at a glance


def test_readme_table_cells_stay_short():
    text = open(os.path.join(ROOT, "README.md")).read()
    long = [cell.strip()[:60] + "..." for line in text.splitlines() if line.startswith("|")
            for cell in line.strip().strip("|").split("|") if len(cell.strip()) > MAX_CELL]
    assert long == [], "README cells over %d characters: %s" % (MAX_CELL, long)


def _slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path):
    with open(path) as f:
        return {_slug(m) for m in re.findall(r"^#+ (.*)$", f.read(), re.M)}


def _markdown_files():
    out = [os.path.join(ROOT, "README.md")]
    for top, _, files in os.walk(os.path.join(ROOT, "docs")):
        out += [os.path.join(top, f) for f in files if f.endswith(".md")]
    return out


def test_every_link_of_the_readme_and_docs_resolves():
    """Relative links name a file of the repository, and an anchor one of
    its headings (web links are not fetched here)."""
    broken = []
    for path in _markdown_files():
        text = re.sub(r"```.*?```", "", open(path).read(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                if file_part else path
            if not os.path.exists(resolved):
                broken.append("%s: %s (no such file)" % (os.path.relpath(path, ROOT), target))
            elif anchor and resolved.endswith(".md") and anchor not in _anchors(resolved):
                broken.append("%s: %s (no such heading)" % (os.path.relpath(path, ROOT), target))
    assert broken == []
