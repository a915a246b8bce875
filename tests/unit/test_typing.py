"""The public API is typed and documented: every callable that
``fuseopt``, ``fuseopt.torch``, ``fuseopt.tensorflow`` and
``fuseopt.tensorflow.keras`` export has a docstring, every function has
annotations for all its parameters and its return, mypy finds nothing in the
public modules, and the package says it is typed (py.typed, PEP 561)."""
import importlib
import inspect
import os
import re
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLIC = ("fuseopt", "fuseopt.torch", "fuseopt.tensorflow", "fuseopt.tensorflow.keras")


def _public_callables():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    for modname in PUBLIC:
        module = importlib.import_module(modname)
        for name in getattr(module, "__all__", None) or [n for n in dir(module)
                                                          if not n.startswith("_")]:
            obj = getattr(module, name)
            if callable(obj) and not inspect.ismodule(obj):
                yield "%s.%s" % (modname, name), obj


def test_every_public_callable_has_a_docstring():
    missing = [name for name, obj in _public_callables() if not (obj.__doc__ or "").strip()]
    assert missing == []


def _public_members():
    """(name, member) for the public methods and properties of the public
    classes: those defined by fuseopt itself, not inherited from a framework."""
    seen = set()
    for name, cls in _public_callables():
        if not inspect.isclass(cls) or cls in seen or not cls.__module__.startswith("fuseopt"):
            continue
        seen.add(cls)
        for klass in cls.__mro__:
            if not klass.__module__.startswith("fuseopt"):
                continue
            for attr, member in vars(klass).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if inspect.isfunction(member) or isinstance(member, property):
                    yield "%s.%s" % (name, attr), member


def test_every_public_method_and_property_has_a_docstring():
    missing = sorted({name for name, member in _public_members()
                      if not (member.__doc__ or "").strip()})
    assert missing == []


def test_public_constructors_are_annotated():
    """Constructors of the classes a training script builds itself."""
    import fuseopt.tensorflow
    import fuseopt.torch
    classes = [fuseopt.ProcessSet, fuseopt.torch.DistributedOptimizer, fuseopt.torch.LocalSGD,
               fuseopt.torch.AdaptiveLocalSGD, fuseopt.torch.SyncBatchNorm,
               fuseopt.tensorflow.DistributedGradientTape,
               fuseopt.tensorflow.SyncBatchNormalization]
    from fuseopt.training.naming import Shared
    missing = []
    for cls in classes + [Shared]:
        sig = inspect.signature(cls.__init__)
        bare = [p.name for p in list(sig.parameters.values())[1:]
                if p.annotation is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        if bare:
            missing.append("%s(%s)" % (cls.__qualname__, ", ".join(bare)))
    assert missing == []


def test_every_public_function_is_annotated():
    missing = []
    for name, obj in _public_callables():
        if not inspect.isfunction(obj):
            continue  # classes: their constructors take framework objects
        sig = inspect.signature(obj)
        bare = [p.name for p in sig.parameters.values() if p.annotation is p.empty]
        if bare or sig.return_annotation is sig.empty:
            missing.append("%s(%s)%s" % (name, ", ".join(bare),
                                         "" if sig.return_annotation is not sig.empty
                                         else " -> ?"))
    assert missing == []


def test_mypy_finds_nothing_in_the_public_modules():
    p = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "Success: no issues found" in p.stdout


def test_package_is_marked_typed():
    import fuseopt
    assert os.path.exists(os.path.join(os.path.dirname(fuseopt.__file__), "py.typed"))
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert re.search(r'fuseopt = \["py.typed"[],]', f.read())


@pytest.mark.parametrize("modname", PUBLIC)
def test_public_module_imports_cleanly(modname):
    importlib.import_module(modname)


def test_keras_module_star_import_gives_its_api_only():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    names = {}
    exec("from fuseopt.tensorflow.keras import *", names)
    assert not {"Any", "Optional", "annotations", "keras", "inspect"} & set(names)
    assert {"DistributedOptimizer", "callbacks", "allreduce", "load_model", "init",
            "DistributedGradientTape"} <= set(names)
