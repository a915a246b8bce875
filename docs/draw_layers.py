"""Draws docs/img/layers.png: fuseopt's layer folders, bottom to top, with
an arrow for every pair of folders where one imports the other. The folders,
their order and the imports come from the code itself, through the same
graph tests/unit/test_layers.py checks, so the picture cannot drift from the
tree: regenerate it with

    python docs/draw_layers.py [--output docs/img/layers.png]
"""
import argparse
import collections
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests", "unit"))

import test_layers  # noqa: E402  (the import graph and the layer order)


def folder_of(module):
    """The box a module is drawn in: its folder, or itself at the top level."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def folder_graph():
    """({layer index: [folders]}, {(from folder, to folder): imports})."""
    layers = collections.defaultdict(list)
    for folder, index in test_layers.LAYER_OF.items():
        layers[index].append(folder)
    edges = collections.Counter()
    for module, targets in test_layers.graph().items():
        for target in targets:
            a, b = folder_of(module), folder_of(target)
            if a != b and a in test_layers.LAYER_OF and b in test_layers.LAYER_OF:
                edges[a, b] += 1
    return dict(layers), dict(edges)


def draw(output):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers, edges = folder_graph()
    where = {}
    fig, ax = plt.subplots(figsize=(11, 7))
    for index, folders in sorted(layers.items()):
        name = test_layers.LAYERS[index][0]
        ax.text(-5.0, index, name, ha="right", va="center", fontsize=10, style="italic")
        for k, folder in enumerate(sorted(folders)):
            x = (k - (len(folders) - 1) / 2.0) * 2.0
            where[folder] = (x, index)
            ax.text(x, index, folder, ha="center", va="center", fontsize=9,
                    bbox=dict(boxstyle="round", fc="#e8eef7", ec="#4a6fa5"))
    for (a, b), count in sorted(edges.items()):
        (xa, ya), (xb, yb) = where[a], where[b]
        ax.annotate("", xy=(xb, yb + 0.18), xytext=(xa, ya - 0.18),
                    arrowprops=dict(arrowstyle="->", color="#888888", lw=0.5 + 0.1 * count,
                                    alpha=0.6))
    ax.set_xlim(-6.5, 5.5)
    ax.set_ylim(-0.7, len(test_layers.LAYERS) - 0.3)
    ax.axis("off")
    ax.set_title("fuseopt's Python layers (bottom to top); an arrow: imports from")
    fig.tight_layout()
    fig.savefig(output, dpi=110)
    plt.close(fig)
    return layers, edges


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", default=os.path.join(HERE, "img", "layers.png"))
    draw(p.parse_args().output)


if __name__ == "__main__":
    main()
