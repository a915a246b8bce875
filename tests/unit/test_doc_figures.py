"""Figures in the README's "Speed" section and in docs/benchmarks.md's
"Current results" come from benchmarks/results/*.md, and every FAIL recorded
there is listed under the README's "Not met". A figure is a number with a unit: a ratio
written against it (1.38x, 1.38×), ms, µs or %. "200 × 16 KiB" (spaced) is a
count, not a ratio. Numbers compare as numbers: 1.38× and 1.38x, 1,000 and
1000, 0.20 % and 0.20% are the same figure."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_NUMBER = r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)"
_FIGURE = re.compile(_NUMBER + r"(?:([x×])(?![\w])|\s?(ms|µs|us|%)(?![\w]))")
_BARE = re.compile(_NUMBER + r"(?![\d.]*\d)")
# In the results a ratio is also written spaced ("<= 1.4 x unconnected").
_RESULT_FIGURE = re.compile(_NUMBER + r"(?:\s?([x×])(?![\w])|\s?(ms|µs|us|%)(?![\w]))")


def _figures(text, pattern=_FIGURE):
    """{(number, unit)} with units x, ms, us, %."""
    out = set()
    for m in pattern.finditer(text):
        unit = m.group(2) or m.group(3)
        out.add((float(m.group(1).replace(",", "")), {"×": "x", "µs": "us"}.get(unit, unit)))
    return out


def _results():
    texts = [open(p).read() for p in sorted(glob.glob(os.path.join(
        ROOT, "benchmarks", "results", "*.md")))]
    assert texts, "no benchmarks/results/*.md"
    return "\n".join(texts)


def _readme_speed_row():
    text = open(os.path.join(ROOT, "README.md")).read()
    m = re.search(r"^## Speed\n(.*?)^## ", text, re.S | re.M)
    assert m, "README has no '## Speed' section"
    return m.group(1)


def _current_results():
    text = open(os.path.join(ROOT, "docs", "benchmarks.md")).read()
    m = re.search(r"^## Current results\n(.*?)^## ", text, re.S | re.M)
    assert m, "docs/benchmarks.md has no '## Current results' section"
    return m.group(1)


def _unsourced(text, results):
    with_unit = _figures(results, _RESULT_FIGURE)
    # A cell of a results table may hold the bare number (a "ms" column).
    bare = {float(n.replace(",", "")) for n in _BARE.findall(results)}
    return sorted("%g%s" % f for f in _figures(text)
                  if f not in with_unit and not (f[1] in ("ms", "us") and f[0] in bare))


def test_extraction_reads_ratios_times_and_percentages_not_counts():
    assert _figures("1.38× and 2.50x, 6.69 ms, 238.2 µs, 96 %, 1,000 ms; 200 × 16 KiB") == {
        (1.38, "x"), (2.5, "x"), (6.69, "ms"), (238.2, "us"), (96.0, "%"), (1000.0, "ms")}
    assert _unsourced("a 1.22× step", "ratio 1.38x") == ["1.22x"]


def test_readme_speed_figures_come_from_the_results():
    assert _unsourced(_readme_speed_row(), _results()) == []


def test_current_benchmark_figures_come_from_the_results():
    assert _unsourced(_current_results(), _results()) == []


def test_every_fail_in_the_results_is_listed_as_not_met():
    """The figure each FAIL judged (a results table's Value column, or the
    first figure after 'target:' in a verdict line) appears under 'Not met'."""
    row = _readme_speed_row()
    assert "**Not met:**" in row
    not_met = _figures(row.split("**Not met:**", 1)[1])
    missing, fails = [], 0
    for path in sorted(glob.glob(os.path.join(ROOT, "benchmarks", "results", "*.md"))):
        header = None
        for line in open(path).read().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if line.startswith("|") and "Value" in cells:
                header = cells
            if "FAIL" not in line:
                continue
            fails += 1
            if line.startswith("|") and header:
                judged = _figures(cells[header.index("Value")])
            else:
                first = _FIGURE.search(line.split("target:", 1)[-1])
                judged = _figures(first.group(0)) if first else set()
            if not judged or not judged <= not_met:
                missing.append("%s: %s" % (os.path.basename(path), line.strip()))
    assert fails > 0
    assert missing == []
