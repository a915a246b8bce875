"""native/src's folders are layers (docs/design.md, "native/src, layer by
layer"): a file includes headers of its own folder or of a lower layer, never
of a higher one or of its sibling in the same row, and every quoted include
names a file that exists. Same-layer includes cannot form a cycle between
folders; cycles between modules of one folder are checked too."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SRC = os.path.join(ROOT, "native", "src")
# Bottom to top; folders in one row do not include each other.
ORDER = [["base"], ["policy", "kernels"], ["transport"], ["transport/mpi", "transport/device"],
         ["transport/nccl", "transport/hccl", "transport/control"], ["exec"], ["loop"], ["api"]]
LAYER = {d: i for i, row in enumerate(ORDER) for d in row}


def includes():
    """(folder, file, included path) for every quoted include of native/src."""
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if f.endswith((".h", ".cc")):
                folder = os.path.relpath(dirpath, SRC)
                for line in open(os.path.join(dirpath, f)):
                    m = re.match(r'#include "(.*)"', line)
                    if m and not m.group(1).startswith("fuseopt/"):
                        yield folder, f, m.group(1)


def test_every_folder_is_a_layer():
    folders = {os.path.relpath(d, SRC) for d, _, files in os.walk(SRC)
               if any(f.endswith((".h", ".cc")) for f in files)}
    assert folders <= set(LAYER), folders - set(LAYER)


def test_includes_point_down_and_resolve():
    bad = []
    for folder, f, inc in includes():
        if not os.path.exists(os.path.join(SRC, inc)):
            bad.append("%s/%s includes %s, which does not exist" % (folder, f, inc))
        elif os.path.dirname(inc) != folder and LAYER[os.path.dirname(inc)] >= LAYER[folder]:
            bad.append("%s/%s -> %s points up or sideways" % (folder, f, inc))
    assert not bad, bad


def test_no_include_cycle_between_modules():
    module = lambda path: os.path.splitext(path)[0]  # noqa: E731 (a .h/.cc pair is one module)
    graph = {}
    for folder, f, inc in includes():
        me = module(os.path.join(folder, f))
        if module(inc) != me:
            graph.setdefault(me, set()).add(module(inc))

    def reaches(start, goal, seen):
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and not seen.add(nxt) and reaches(nxt, goal, seen)):
                return True
        return False

    cycles = sorted(m for m in graph if reaches(m, m, set()))
    assert not cycles, cycles


# A function definition at namespace level starts at column 0 (clang-format,
# .clang-format), its signature may wrap over several lines (parameters,
# "noexcept", a constructor's initializer list) up to the line that ends in
# "{", and its body closes with a "}" at column 0. A statement that reaches a
# ";" first is a declaration; one whose "{" follows "=" is an initializer.
_STARTS = re.compile(r"[A-Za-z_]")
_NOT_A_FUNCTION = re.compile(r"(namespace|class|struct|enum|union|extern|using|typedef)\b")


def function_lengths(text):
    """(first line, body lines) of each namespace-level function in text."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if not _STARTS.match(lines[i]) or _NOT_A_FUNCTION.match(lines[i]):
            i += 1
            continue
        j = i
        while j < len(lines) and ";" not in lines[j] and not lines[j].rstrip().endswith("{"):
            j += 1
        signature = " ".join(lines[i:j + 1])
        if j == len(lines) or ";" in lines[j] or "(" not in signature or \
                re.search(r"=\s*\{$", signature.rstrip()):
            i = j + 1
            continue
        k = j + 1
        while k < len(lines) and not lines[k].startswith("}"):
            k += 1
        yield i + 1, k - j - 1
        i = k + 1


def test_function_lengths_are_measured():
    text = "int f(int a) {\n" + "  a++;\n" * 61 + "}\nnamespace x {\nvoid g() const {\n}\n"
    assert list(function_lengths(text)) == [(1, 61), (65, 0)]
    wrapped = ("void Loop::help(const std::function<bool()>& done,\n"
               "                int deadline) {\n" + "  a++;\n" * 80 + "}\n"
               "Loop::Loop(int a)\n    : a_(a) {\n  b();\n}\n"
               "int h() noexcept {\n  return 1;\n}\n"
               "int declared(int a,\n             int b);\n"
               "const int table[] = {\n  1,\n};\n")
    assert list(function_lengths(wrapped)) == [(1, 80), (84, 1), (88, 1)]


def test_no_native_function_over_60_lines():
    long = []
    for dirpath, _, files in os.walk(os.path.join(ROOT, "native")):
        for f in files:
            if f.endswith((".h", ".cc")):
                path = os.path.join(dirpath, f)
                for line, n in function_lengths(open(path).read()):
                    if n > 60:
                        long.append("%s:%d (%d lines)" % (os.path.relpath(path, ROOT), line, n))
    assert not long, long
