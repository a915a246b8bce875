"""Every public name of Horovod 0.28.1's ``horovod.torch``,
``horovod.torch.elastic``, ``horovod.tensorflow``,
``horovod.tensorflow.elastic``, ``horovod.tensorflow.keras``,
``horovod.tensorflow.keras.callbacks``,
``horovod.tensorflow.keras.elastic``, ``horovod.ray`` (with
``RayExecutor``'s methods) and ``horovod.spark`` exists in fuseopt's module of the same
place, with Horovod's signature.

The reference is ``horovod_api.py`` next to this file, transcribed by hand from
Horovod's source. For a callable, fuseopt's signature must:

* have every Horovod parameter, with the same kind, and take arbitrary
  keywords (a ``**`` parameter of any name) where Horovod's takes ``**kwargs``;
* start with Horovod's positional parameters, in Horovod's order, so that a
  positional call binds the same way;
* give each parameter Horovod's default: literals compare by ``repr``, a name
  from Horovod's source (``Average``, ``global_process_set``,
  ``Compression.none``) must be fuseopt's object of that name (``is``);
  a parameter that Horovod requires may have a default in fuseopt (every
  Horovod call still binds the same way);
* have extra parameters only after all of Horovod's, and only optional ones.

Each name is its own test id (``torch::allreduce``), and a failure lists
Horovod's and fuseopt's signatures and every difference found.
"""
import ast
import importlib
import importlib.util
import inspect
import os

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location(
    "fuseopt_tests_horovod_api", os.path.join(_HERE, "horovod_api.py"))
api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(api)

FUSEOPT_MODULES = {
    "horovod.torch": "fuseopt.torch",
    "horovod.torch.elastic": "fuseopt.torch.elastic",
    "horovod.tensorflow": "fuseopt.tensorflow",
    "horovod.tensorflow.elastic": "fuseopt.tensorflow.elastic",
    "horovod.tensorflow.keras": "fuseopt.tensorflow.keras",
    "horovod.tensorflow.keras.callbacks": "fuseopt.tensorflow.keras.callbacks",
    "horovod.tensorflow.keras.elastic": "fuseopt.tensorflow.keras.elastic",
    "horovod.ray": "fuseopt.ray",
    "horovod.ray.elastic": "fuseopt.ray.elastic",
    "horovod.spark": "fuseopt.spark",
}
SHORT = {
    "horovod.torch": "torch",
    "horovod.torch.elastic": "torch.elastic",
    "horovod.tensorflow": "tf",
    "horovod.tensorflow.elastic": "tf.elastic",
    "horovod.tensorflow.keras": "keras",
    "horovod.tensorflow.keras.callbacks": "keras.callbacks",
    "horovod.tensorflow.keras.elastic": "keras.elastic",
    "horovod.ray": "ray",
    "horovod.ray.elastic": "ray.elastic",
    "horovod.spark": "spark",
}

# Names that docs/migration.md documents as intentionally different from
# Horovod ('differs' or 'raises') in a way that changes the signature: for
# these only existence and the presence of Horovod's parameter names are
# checked. Keys are (Horovod module, name); values the reason from migration.md.
#
# Empty on purpose: every 'differs'/'raises' row of migration.md was read, and
# none of them changes a signature -- they are about behaviour:
#   torch  init: "`comm=` raises" (the parameter is still there);
#   torch  ProcessSet & co.: mpi4py communicators raise, device tensors raise;
#   torch/keras DistributedOptimizer: wraps instead of subclassing; keras
#          `device_dense`, `device_sparse`, `num_groups`, `groups` "accepted and
#          have no effect" (still accepted, so same signature);
#   keras  broadcast_global_variables: raises, as Horovod's under TF2;
#   keras  load_model: `legacy_opts=True` raises;
#   keras  callbacks.LearningRateScheduleCallback / LearningRateWarmupCallback:
#          `momentum_correction` cannot act on Keras 3 optimizers;
#   tf     broadcast_global_variables: raises, as Horovod's under TF2;
#   elastic (torch, tf, keras): "same API and semantics", a reset restarts the job.
ALLOWED_SIGNATURE_DIFFERENCES = {}

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)

_loaded = {}


def _fuseopt_module(hmod):
    """Imports fuseopt's counterpart of ``hmod`` once per session (the test
    extras install torch and TensorFlow: a missing one is a failure)."""
    if hmod not in _loaded:
        _loaded[hmod] = importlib.import_module(FUSEOPT_MODULES[hmod])
    return _loaded[hmod]


# Defaults that are Horovod's objects, for which fuseopt's default is None and
# None means the same thing (Horovod itself would fail on None, so no Horovod
# call can tell them apart): process_set=None is the global set,
# compression=None is no compression. The object itself is accepted too.
NONE_MEANS = {"global_process_set", "Compression.none"}


def _horovod_signature(params):
    parts = []
    for name, default, kind in params:
        if kind == api.VAR_KEYWORD:
            parts.append("**" + name)
        else:
            parts.append(name if default is api.REQUIRED else "%s=%s" % (name, default))
    return "(%s)" % ", ".join(parts)


def _resolve(module, dotted):
    obj = module
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _method(module, dotted):
    """``Class.method`` as an instance's (bound: no ``self``), a classmethod as is."""
    owner_name, method = dotted.rsplit(".", 1)
    owner = _resolve(module, owner_name)
    if isinstance(inspect.getattr_static(owner, method), (classmethod, staticmethod)):
        return getattr(owner, method)
    return getattr(owner.__new__(owner), method)


def _default_problem(module, name, horovod_default, param):
    """A description of how fuseopt's default differs from Horovod's, or None."""
    if horovod_default is api.REQUIRED:
        return None  # fuseopt may make a required parameter optional
    if param.default is inspect.Parameter.empty:
        return "%s: required in fuseopt, Horovod's default is %s" % (name, horovod_default)
    try:
        literal = ast.literal_eval(horovod_default)
    except ValueError:
        try:
            expected = _resolve(module, horovod_default)
        except AttributeError:
            return "%s: Horovod's default %s does not exist in fuseopt" % (
                name, horovod_default)
        if param.default is None and horovod_default in NONE_MEANS:
            return None
        if param.default is not expected:
            return "%s: default %r is not fuseopt's %s (%r)" % (
                name, param.default, horovod_default, expected)
        return None
    if repr(param.default) != repr(literal):
        return "%s: default %r, Horovod's is %s" % (name, param.default, horovod_default)
    return None


def _signature_problems(module, params, obj, names_only):
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError) as e:
        return ["no signature: %s" % e], "?"
    fparams = list(sig.parameters.values())
    by_name = sig.parameters
    problems = []

    missing = [name for name, _, kind in params
               if kind != api.VAR_KEYWORD and name not in by_name]
    if missing:
        problems.append("missing parameters: %s" % ", ".join(missing))
    var_keyword = [name for name, _, kind in params if kind == api.VAR_KEYWORD]
    if var_keyword and not any(p.kind == inspect.Parameter.VAR_KEYWORD for p in fparams):
        problems.append("no **kwargs: Horovod's takes **%s" % var_keyword[0])
    params = [p for p in params if p[2] != api.VAR_KEYWORD]  # checked above
    if names_only:
        return problems, str(sig)

    # Positional binding: Horovod's positional parameters lead, in order.
    h_positional = [name for name, _, kind in params if kind == api.POSITIONAL_OR_KEYWORD]
    f_positional = [p.name for p in fparams if p.kind in _POSITIONAL]
    if f_positional[:len(h_positional)] != h_positional:
        problems.append("positional parameters are (%s), Horovod's are (%s)" % (
            ", ".join(f_positional), ", ".join(h_positional)))

    # Kinds: anything Horovod lets you pass by keyword must be a keyword here.
    for name, _, kind in params:
        p = by_name.get(name)
        if p is None:
            continue
        if kind == api.POSITIONAL_OR_KEYWORD and p.kind != inspect.Parameter.POSITIONAL_OR_KEYWORD:
            problems.append("%s: kind %s, Horovod's is %s" % (name, p.kind.name, kind))
        elif kind == api.KEYWORD_ONLY and p.kind not in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            problems.append("%s: kind %s, Horovod's is %s" % (name, p.kind.name, kind))

    # Defaults.
    for name, default, _ in params:
        if name in by_name:
            problem = _default_problem(module, name, default, by_name[name])
            if problem:
                problems.append(problem)

    # Extras: optional, and only after the last of Horovod's parameters.
    h_names = {name for name, _, _ in params}
    positions = [i for i, p in enumerate(fparams) if p.name in h_names]
    last = max(positions) if positions else -1
    for i, p in enumerate(fparams):
        if p.name in h_names:
            continue
        if i < last:
            problems.append("extra parameter %s comes before Horovod's %s" % (
                str(p), fparams[last].name))
        elif p.kind not in _VARIADIC and p.default is inspect.Parameter.empty:
            problems.append("extra parameter %s is required" % p.name)
    return problems, str(sig)


CASES = [pytest.param(hmod, name, entry, id="%s::%s" % (SHORT[hmod], name))
         for hmod, names in api.MODULES.items() for name, entry in names.items()]


@pytest.mark.parametrize("hmod, name, entry", CASES)
def test_horovod_name(hmod, name, entry):
    module = _fuseopt_module(hmod)
    where = "%s.%s" % (FUSEOPT_MODULES[hmod], name)
    try:
        obj = _method(module, name) if "." in name else getattr(module, name)
    except AttributeError:
        raise AssertionError("%s is missing (Horovod's %s.%s)" % (where, hmod, name)) from None

    if entry == "constant":
        type_name = api.CONSTANT_TYPES.get((hmod, name))
        if type_name is not None:
            assert isinstance(obj, getattr(module, type_name)), \
                "%s is %r, not a %s" % (where, obj, type_name)
        return
    if entry == "module":
        assert inspect.ismodule(obj), "%s is %r, not a module" % (where, obj)
        return
    if entry == "class":
        assert isinstance(obj, type), "%s is %r, not a class" % (where, obj)
        missing = [a for a in api.CLASS_ATTRIBUTES.get((hmod, name), ()) if not hasattr(obj, a)]
        assert not missing, "%s lacks %s" % (where, ", ".join(missing))
        for base in api.CLASS_BASES.get((hmod, name), ()):
            assert issubclass(obj, base), "%s is not a subclass of %s (mro: %s)" % (
                where, base.__name__, [c.__name__ for c in obj.__mro__])
        return

    assert callable(obj), "%s is %r, not callable" % (where, obj)
    if name in api.CLASSES[hmod]:
        assert isinstance(obj, type), "%s is %r; Horovod's is a class" % (where, obj)
    problems, fsig = _signature_problems(
        module, entry, obj, names_only=(hmod, name) in ALLOWED_SIGNATURE_DIFFERENCES)
    assert not problems, "%s differs from Horovod 0.28.1:\n  Horovod: %s%s\n  fuseopt: %s%s\n  - %s" % (
        where, name, _horovod_signature(entry), name, fsig, "\n  - ".join(problems))


def test_horovod_import_paths_that_scripts_use():
    """``sed s/horovod/fuseopt/`` of a script importing these paths imports,
    and each name is the binding's own object."""
    import importlib
    import fuseopt.training.elastic
    import fuseopt.tensorflow.keras as tfk
    import fuseopt.torch as ft
    mpi_ops = importlib.import_module("fuseopt.torch.mpi_ops")
    for name in ("allreduce", "allreduce_async_", "synchronize", "poll", "init", "rank", "size",
                 "broadcast_", "allgather", "join", "Average", "Sum"):
        assert getattr(mpi_ops, name) is getattr(ft, name), name
    exceptions = importlib.import_module("fuseopt.common.exceptions")
    assert issubclass(exceptions.HorovodInternalError, RuntimeError)
    assert exceptions.HorovodInternalError is ft.HorovodInternalError
    assert exceptions.HostsUpdatedInterrupt is fuseopt.training.elastic.HostsUpdatedInterrupt
    keras_path = importlib.import_module("fuseopt.keras")
    assert keras_path.DistributedOptimizer is tfk.DistributedOptimizer
    assert importlib.import_module("fuseopt.keras.callbacks").BroadcastGlobalVariablesCallback \
        is tfk.callbacks.BroadcastGlobalVariablesCallback
    assert importlib.import_module("fuseopt.keras.elastic").KerasState is tfk.elastic.KerasState


@pytest.mark.parametrize("path", ["fuseopt.torch", "fuseopt.tensorflow", "fuseopt.tensorflow.keras"])
def test_op_constants_are_the_cores_ops(path):
    # Existing is not enough: each name must select its own reduction in the
    # core (a swapped or shared value would reduce with the wrong op).
    from fuseopt.base._native import lib
    module = importlib.import_module(path)
    expected = {"Sum": lib.FUSEOPT_SUM, "Average": lib.FUSEOPT_AVERAGE, "Min": lib.FUSEOPT_MIN,
                "Max": lib.FUSEOPT_MAX, "Product": lib.FUSEOPT_PRODUCT,
                "Adasum": lib.FUSEOPT_ADASUM}
    got = {name: getattr(module, name) for name in expected}
    assert got == expected, got
    assert len(set(got.values())) == len(got)
