"""Which of a Keras model's variables a checkpoint or an elastic commit
shares across ranks, and which stay per rank."""
from typing import Any, List, Tuple


def split_model_variables(model: Any) -> Tuple[List[Any], List[Any], List[Any]]:
    """(shared variables, per-rank seed-generator states, optimizer
    variables). The seed generators (Dropout's, ...) are per rank: the same
    state on every rank would draw the same masks everywhere."""
    optimizer = getattr(model, "optimizer", None)  # None: never compiled
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    seeds = [v for v in model.variables if v.path.endswith("seed_generator_state")]
    shared = [v for v in model.variables if not v.path.endswith("seed_generator_state")]
    return shared, seeds, list(optimizer.variables) if optimizer is not None else []
