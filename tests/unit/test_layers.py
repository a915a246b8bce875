"""The Python core's imports point one way (docs/design.md, "Layers"): every
module sits in one layer and imports only from its own layer or below, and
no set of modules imports itself in a circle (function-level imports
included: a cycle hidden inside a function is still a cycle)."""
import ast
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGE = os.path.join(ROOT, "fuseopt")

# Bottom to top, by folder: a module's layer is its folder under fuseopt/
# (the few modules at the top level are named). A new folder or top-level
# module not listed here fails the test: place it.
LAYERS = [
    ("base", ["base", "_version", "_build"]),
    ("core", ["core"]),
    ("api", ["api"]),
    ("training", ["training"]),
    ("runner", ["runner"]),
    ("package", ["__init__", "errors", "checkpoint", "elastic"]),
    ("bindings", ["torch", "tensorflow", "keras", "common", "mxnet"]),
    ("tools", ["tools", "launcher", "__main__", "ray", "spark"]),
]
LAYER_OF = {m: i for i, (_, mods) in enumerate(LAYERS) for m in mods}


def modules():
    out = {}
    for dirpath, _, files in os.walk(PACKAGE):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                out[rel[:-len(".__init__")] if rel.endswith(".__init__") else rel] = path
    return out


def imported(module, path, known):
    """fuseopt modules that ``module`` imports (outside TYPE_CHECKING blocks)."""
    tree = ast.parse(open(path).read())
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            skip.update(id(n) for n in ast.walk(node))
    package = module if path.endswith("__init__.py") else module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
            subs = [base + "." + a.name for a in node.names if base + "." + a.name in known]
            compiled = all(a.name.startswith("_fuseopt_cffi") for a in node.names)  # the cores
            found.update(subs or ([base] if base in known and not compiled else []))
    return found - {module}


def exposed(known):
    """What ``import fuseopt`` / ``from fuseopt import X`` reaches: fuseopt's
    __init__ imports its public names on first use (PEP 562), from the
    modules its TYPE_CHECKING block lists and the submodules it names in
    __getattr__; an import of ``fuseopt`` is an import of all of them."""
    tree = ast.parse(open(os.path.join(PACKAGE, "__init__.py")).read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            out.add("fuseopt." + node.module if node.module else "fuseopt")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                "fuseopt." + node.value in known:
            out.add("fuseopt." + node.value)
    return out & set(known)


def graph():
    known = modules()
    package = exposed(known)
    g = {m: imported(m, p, known) for m, p in known.items()}
    for m, targets in g.items():
        if "fuseopt" in targets or m == "fuseopt":
            targets.discard("fuseopt")
            targets.update(package - {m})
    return g


def layer(module):
    parts = module.split(".")
    return LAYER_OF[parts[1] if len(parts) > 1 else "__init__"]


def test_every_module_has_a_layer():
    unplaced = [m for m in modules() if m != "fuseopt" and m.split(".")[1] not in LAYER_OF]
    assert not unplaced, "add these to LAYERS (and docs/design.md): %s" % unplaced


def test_no_folder_holds_more_than_14_source_files():
    """A folder a newcomer can take in at a glance, in Python and C++ alike."""
    crowded = {}
    for top, exts in (("fuseopt", (".py",)), ("native", (".cc", ".h"))):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            count = sum(f.endswith(exts) for f in files)
            if count > 14:
                crowded[os.path.relpath(dirpath, ROOT)] = count
    assert not crowded, crowded


def test_imports_point_down():
    upward = ["%s -> %s" % (m, t) for m, targets in graph().items() for t in targets
              if m != "fuseopt" and layer(t) > layer(m)]
    assert not upward, upward


def test_an_import_of_the_package_counts_as_what_it_exposes():
    # fuseopt/__init__.py imports lazily: without this, `from fuseopt import
    # run` in a low layer would import upward unseen.
    known = modules()
    package = exposed(known)
    assert {"fuseopt.runner", "fuseopt.api.ops", "fuseopt.core.world", "fuseopt.errors",
            "fuseopt.elastic", "fuseopt.checkpoint"} <= package, package
    g = graph()
    assert "fuseopt.runner" in g["fuseopt"] and all("fuseopt" not in t for t in g.values())


def test_no_import_cycle():
    g = graph()
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v):  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in g:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def test_errors_is_a_pure_bottom_layer():
    """fuseopt.base.errors names the failures; it writes nothing anywhere. The
    note that tells fuseoptrun why a rank is failing is written where the
    failure reaches the training script (handles.check_delivered)."""
    g = graph()
    reached, todo = set(), ["fuseopt.base.errors"]
    while todo:
        for target in g.get(todo.pop(), ()):
            if target not in reached:
                reached.add(target)
                todo.append(target)
    launching = {"fuseopt.base.launch_notes", "fuseopt.base.launch_records"}
    assert not reached & launching and not any(m.startswith("fuseopt.launcher") for m in reached), \
        sorted(reached)


def test_design_table_and_layer_picture_follow_the_tree(tmp_path):
    """docs/design.md's layer table names every folder of fuseopt/, and
    docs/draw_layers.py (which draws docs/img/layers.png from this file's
    graph) runs and places every folder and top-level module."""
    import importlib.util
    folders = sorted(d for d in os.listdir(PACKAGE) if not d.startswith("__")
                     and os.path.isfile(os.path.join(PACKAGE, d, "__init__.py")))
    design = open(os.path.join(ROOT, "docs", "design.md")).read()
    table = design[design.index("| layer (bottom to top) |"):design.index("### native/src")]
    missing = [f for f in folders if "`fuseopt/%s/`" % f not in table and "`%s/`" % f not in table]
    assert not missing, "design.md's layer table lacks %s" % missing
    spec = importlib.util.spec_from_file_location(
        "draw_layers", os.path.join(ROOT, "docs", "draw_layers.py"))
    draw_layers = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(draw_layers)
    layers, edges = draw_layers.draw(str(tmp_path / "layers.png"))
    drawn = {f for fs in layers.values() for f in fs}
    assert set(folders) <= drawn and (tmp_path / "layers.png").stat().st_size > 10000
    assert ("torch", "core") in edges and not any(
        LAYER_OF[a] < LAYER_OF[b] for a, b in edges), edges


def test_no_python_function_over_60_lines():
    """Functions short enough to read at once, in the package and in the
    benchmarks."""
    long = []
    for top in ("fuseopt", "benchmarks"):
        for dirpath, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if not f.endswith(".py"):
                    continue
                path = os.path.join(dirpath, f)
                for node in ast.walk(ast.parse(open(path).read())):
                    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        lines = node.end_lineno - node.lineno + 1
                        if lines > 60:
                            long.append("%s:%d %s (%d lines)" % (
                                os.path.relpath(path, ROOT), node.lineno, node.name, lines))
    assert not long, long
