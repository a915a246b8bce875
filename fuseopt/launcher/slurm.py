"""Hosts and slots from a Slurm allocation, for fuseoptrun without -H.

Inside ``sbatch`` or ``salloc`` (``SLURM_JOB_ID`` set), the allocation names
its nodes in Slurm's compressed form (``SLURM_JOB_NODELIST=node[01-03],gpu7``)
and its tasks per node as counts with repeats (``SLURM_TASKS_PER_NODE=2(x3),1``).
fuseoptrun turns them into a host list and lets Hydra start its proxies with
``srun`` (``-launcher slurm``), so no ssh between nodes is needed.
"""
from .hosts import HostError


def in_allocation(environ):
    return bool(environ.get("SLURM_JOB_ID"))


def _split_top_level(text):
    """'a[1,2],b' -> ['a[1,2]', 'b']: commas inside brackets do not split."""
    items, depth, current = [], 0, []
    for ch in text:
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostError("SLURM_JOB_NODELIST %r: unbalanced ']'" % text)
        if ch == "," and depth == 0:
            items.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise HostError("SLURM_JOB_NODELIST %r: unbalanced '['" % text)
    items.append("".join(current))
    return [i for i in items if i]


def _range_values(spec, whole):
    """'01-03,7' -> ['01', '02', '03', '7'] (zero padding kept)."""
    values = []
    for part in spec.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise HostError("SLURM_JOB_NODELIST %r: bad range %r" % (whole, part))
        if not dash:
            values.append(low)
            continue
        if int(high) < int(low):
            raise HostError("SLURM_JOB_NODELIST %r: empty range %r" % (whole, part))
        values += [str(n).zfill(len(low)) for n in range(int(low), int(high) + 1)]
    return values


def _expand_item(item, whole):
    start = item.find("[")
    if start < 0:
        return [item]
    end = item.index("]", start)
    head, tail = item[:start], item[end + 1:]
    return [head + value + rest for value in _range_values(item[start + 1:end], whole)
            for rest in _expand_item(tail, whole)]


def expand_nodelist(text):
    """Slurm's compressed node list -> host names, in order."""
    hosts = []
    for item in _split_top_level(text.strip()):
        hosts += _expand_item(item, text)
    if not hosts:
        raise HostError("SLURM_JOB_NODELIST %r names no node" % text)
    return hosts


def expand_counts(text, what="SLURM_TASKS_PER_NODE"):
    """'2(x3),1' -> [2, 2, 2, 1]."""
    counts = []
    for item in filter(None, text.strip().split(",")):
        count, _, repeat = item.partition("(x")
        if not count.isdigit() or (repeat and not (repeat.endswith(")") and
                                                   repeat[:-1].isdigit())):
            raise HostError("%s %r: cannot read %r" % (what, text, item))
        counts += [int(count)] * (int(repeat[:-1]) if repeat else 1)
    return counts


def hosts(environ):
    """[(host, slots)] of the allocation: slots are its tasks per node (or,
    when the job asked for no task count, its CPUs per node)."""
    names = expand_nodelist(environ.get("SLURM_JOB_NODELIST", ""))
    what = "SLURM_TASKS_PER_NODE" if environ.get("SLURM_TASKS_PER_NODE") \
        else "SLURM_JOB_CPUS_PER_NODE"
    counts = expand_counts(environ.get(what, ""), what)
    if len(counts) != len(names):
        raise HostError("%s gives %d counts for the %d nodes of SLURM_JOB_NODELIST"
                        % (what, len(counts), len(names)))
    return list(zip(names, counts))
