"""``fuseopt.spark``: Horovod's ``horovod.spark.run`` on a Spark cluster::

    from pyspark.sql import SparkSession
    import fuseopt.spark

    spark = SparkSession.builder.getOrCreate()
    results = fuseopt.spark.run(train, args=(model_bytes,), num_proc=4)  # one per rank

Each rank runs in a Spark task of a barrier stage, as a fresh process that
the task starts; the ranks form one MPI world through a PMI server in the
driver (docs/scaling.md, "Running inside Spark"). Needs PySpark and Java:
``pip install fuseopt[spark]``.

Not here: ``run_elastic`` and Horovod's Spark Estimators
(``horovod.spark.keras`` / ``.torch`` / ``.lightning``): importing or
calling them raises UnsupportedError (docs/migration.md).
"""
from typing import NoReturn

from ..base.errors import UnsupportedError
from .runner import run
from .task import get_available_devices


def run_elastic(fn, args=(), kwargs={}, num_proc=None, min_num_proc=None,  # noqa: B006
                max_num_proc=None, start_timeout=None, elastic_timeout=None, reset_limit=None,
                env=None, stdout=None, stderr=None, verbose=1, nics=None,
                prefix_output_with_timestamp=False, min_np=None, max_np=None) -> NoReturn:
    """Horovod's elastic Spark run (its signature): not in fuseopt, raises."""
    raise UnsupportedError(
        "fuseopt.spark.run_elastic: fuseopt has no elastic Spark runner; its elastic jobs "
        "restart as a new MPI world from commits each host keeps on disk, which fuseoptrun's "
        "elastic driver (--min-np/--max-np) manages. Use fuseopt.spark.run with a fixed "
        "num_proc instead, and save_checkpoint/load_checkpoint to resume")


__all__ = ["run", "run_elastic", "get_available_devices"]
