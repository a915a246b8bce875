"""Framework-neutral tensor names, for jobs where ranks run different frameworks.

Ranks meet on tensor *names*. Inside one framework the bindings derive them
from the model (``model.named_parameters()`` in PyTorch, variable paths in
Keras), which a PyTorch module and a Keras model never share. A *name map*
says, per local parameter, which shared tensor it is and, where the
frameworks store it differently, how to permute its axes into the shared
layout::

    # PyTorch rank: nn.Linear stores weight as [out, in]; the shared layout
    # is Keras's [in, out], so the weight travels transposed.
    torch_map = {"fc1.weight": fuseopt.Shared("fc1.kernel", perm=(1, 0)),
                 "fc1.bias": "fc1.bias"}
    # Keras rank: variable paths, already in the shared layout.
    keras_map = {"mlp/fc1/kernel": "fc1.kernel", "mlp/fc1/bias": "fc1.bias"}

A map is a dict (local name -> shared name or :class:`Shared`) or a
function of the local name returning one of those. Every parameter the
binding reduces or broadcasts must be mapped: an unmapped one would wait
forever for a partner of the same name on the other framework's ranks.
"""
from typing import Any, Dict, Optional, Sequence, Tuple

from ..api import objects
from ..base.errors import InvalidArgumentError, MismatchError

# Both bindings use these prefixes for mapped tensors, so that a PyTorch rank
# and a Keras rank negotiate the same names.
GRADIENT_PREFIX = "grad."
BROADCAST_PREFIX = "broadcast.shared."


class Shared:
    """A shared tensor name and the permutation of axes from this
    framework's layout to the shared one (``tensor.permute(perm)`` /
    ``tf.transpose(tensor, perm)``); ``perm=None`` means the same layout."""

    __slots__ = ("name", "perm", "inverse")

    def __init__(self, name: str, perm: Optional[Sequence[int]] = None) -> None:
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError("Shared name must be a non-empty string, not %r" % (name,))
        if perm is not None:
            perm = tuple(int(a) for a in perm)
            if sorted(perm) != list(range(len(perm))):
                raise InvalidArgumentError("perm %r for shared tensor %r is not a permutation "
                                           "of 0..%d" % (perm, name, len(perm) - 1))
            if perm == tuple(range(len(perm))):
                perm = None
        self.name = name
        self.perm = perm
        self.inverse = None if perm is None else tuple(sorted(range(len(perm)),
                                                              key=perm.__getitem__))

    def shared_shape(self, local_shape: Sequence[int]) -> Tuple[int, ...]:
        """The shape a tensor of ``local_shape`` (this framework's layout) has
        in the shared layout."""
        local_shape = tuple(local_shape)
        if self.perm is None:
            return local_shape
        if len(self.perm) != len(local_shape):
            raise InvalidArgumentError(
                "shared tensor %r: perm %r does not fit a tensor of shape %s"
                % (self.name, self.perm, list(local_shape)))
        return tuple(local_shape[a] for a in self.perm)

    def to_config(self) -> Dict[str, Any]:
        """A JSON-able dict (``Shared(**config)`` rebuilds it), for Keras
        ``get_config``."""
        return {"name": self.name, "perm": list(self.perm) if self.perm else None}

    def __eq__(self, other):
        return isinstance(other, Shared) and (self.name, self.perm) == (other.name, other.perm)

    def __hash__(self):
        return hash((self.name, self.perm))

    def __repr__(self):
        return "Shared(%r%s)" % (self.name, ", perm=%r" % (self.perm,) if self.perm else "")


def resolve(name_map, local_names):
    """The Shared entry of each local name, in order. Raises a clear error
    naming every unmapped parameter, and names mapped twice."""
    out, missing = [], []
    for local in local_names:
        target = name_map(local) if callable(name_map) else name_map.get(local)
        if target is None:
            missing.append(local)
            continue
        out.append(target if isinstance(target, Shared) else Shared(target))
    if missing:
        raise InvalidArgumentError(
            "name_map has no shared name for %d parameter(s): %s. Map every parameter, or the "
            "ranks of the other framework would wait for it forever" % (
                len(missing), ", ".join(missing[:10]) + (", ..." if len(missing) > 10 else "")))
    names = [s.name for s in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgumentError("name_map gives several parameters the same shared name: %s"
                                   % ", ".join(twice))
    return out


def map_to_config(name_map):
    """A dict name map as plain JSON-able data (for Keras get_config)."""
    if name_map is None:
        return None
    if callable(name_map):
        raise InvalidArgumentError("a name_map function cannot be saved with the model; pass a "
                                   "dict to save and load it")
    return {k: (v.to_config() if isinstance(v, Shared) else v) for k, v in name_map.items()}


def map_from_config(config):
    if config is None:
        return None
    return {k: (Shared(v["name"], v["perm"]) if isinstance(v, dict) else v)
            for k, v in config.items()}


def verify_agreement(tensors, what, process_set=None):
    """Collective: checks that every rank maps the same shared names, with the
    same shape (in the shared layout) and dtype. ``tensors``: {shared name:
    (shape, dtype name)}. Raises MismatchError on every rank, listing each
    disagreement and which ranks hold which value, instead of letting a
    mismatched job hang or fail tensor by tensor."""
    mine = {name: (tuple(int(d) for d in shape), str(dtype))
            for name, (shape, dtype) in tensors.items()}
    everyone = objects.allgather_object(mine, name="fuseopt.training.naming.verify",
                                        process_set=process_set)
    ranks = getattr(process_set, "ranks", None) or range(len(everyone))
    problems = []
    for name in sorted(set().union(*everyone)):
        seen = {}
        for rank, table in zip(ranks, everyone):
            value = table.get(name)
            what_it_is = "no such tensor" if value is None else \
                "%s[%s]" % (value[1], ",".join(map(str, value[0])))
            seen.setdefault(what_it_is, []).append(rank)
        if len(seen) > 1:  # worded like the core's mismatch errors
            problems.append("'%s': %s" % (name, "; ".join(
                "%s %s %s %s" % ("rank" if len(ranks) == 1 else "ranks",
                                 ", ".join(map(str, ranks)),
                                 "has" if len(ranks) == 1 else "have", value)
                for value, ranks in sorted(seen.items(), key=lambda kv: kv[1]))))
    if problems:
        raise MismatchError(
            "%s: ranks disagree about %d shared tensor(s) (shapes in the shared layout; check "
            "name_map and perm): %s" % (what, len(problems), " | ".join(problems[:8]) +
                                        (" | ..." if len(problems) > 8 else "")))


def local_names(params, named_parameters):
    """Each parameter's name from ``named_parameters`` ((name, parameter)
    pairs), or its position when there is none; refuses duplicates and
    parameters missing from it."""
    if named_parameters is None:
        return ["param.%d" % i for i in range(len(params))]
    named = list(named_parameters)
    names = [n for n, _ in named]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InvalidArgumentError("named_parameters has duplicate names: %s" % dup)
    by_param = {p: n for n, p in named}
    missing = [i for i, p in enumerate(params) if p not in by_param]
    if missing:
        raise InvalidArgumentError(
            "%d optimizer parameter(s) are not in named_parameters (positions %s); pass "
            "model.named_parameters() of the model this optimizer trains" % (
                len(missing), missing[:5]))
    return [by_param[p] for p in params]
