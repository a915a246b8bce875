"""Horovod's ``horovod.runner.util.threads``: the small thread helpers that
its users' harnesses (and Horovod's own test utilities) import."""
import threading
from typing import Any, Callable, Optional, Sequence


def _check_args(args):
    if not isinstance(args, tuple):
        raise ValueError("args must be a tuple, not %s; for one argument use (arg,)"
                         % type(args).__name__)


def in_thread(target: Callable, args: tuple = (), name: Optional[str] = None,
              daemon: bool = True, silent: bool = False) -> threading.Thread:
    """Starts ``target(*args)`` in a new thread and returns it. With
    ``silent``, an exception in the thread is swallowed instead of printed."""
    _check_args(args)

    def swallowing(*a):
        try:
            target(*a)
        except Exception:  # the caller asked for silence
            pass

    thread = threading.Thread(target=swallowing if silent else target, args=args, name=name,
                              daemon=daemon)
    thread.start()
    return thread


def on_event(event: threading.Event, func: Callable, args: tuple = (),
             stop: Optional[threading.Event] = None, check_stop_interval_s: float = 1.0,
             daemon: bool = True, silent: bool = False) -> threading.Thread:
    """Starts a thread that calls ``func(*args)`` once ``event`` is set,
    unless ``stop`` is set first (looked at every ``check_stop_interval_s``).
    A non-daemon thread needs a ``stop`` event, or it could keep the process."""
    if event is None:
        raise ValueError("event must not be None")
    _check_args(args)
    if stop is None and not daemon:
        raise ValueError("a non-daemon event thread needs a stop event")

    def wait_then_call():
        while not event.wait(None if stop is None else check_stop_interval_s):
            if stop.is_set():
                return
        if stop is None or not stop.is_set():
            func(*args)

    return in_thread(wait_then_call, daemon=daemon, silent=silent)


def execute_function_multithreaded(fn: Callable, args_list: Sequence[Sequence[Any]],
                                   block_until_all_done: bool = True,
                                   max_concurrent_executions: int = 1000):
    """Calls ``fn(*args)`` for each ``args`` of ``args_list`` on up to
    ``max_concurrent_executions`` threads. Returns {index: result} when
    ``block_until_all_done``, else None (the calls go on in daemon threads)."""
    results = {}
    pending = list(enumerate(args_list))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not pending:
                    return
                index, args = pending.pop(0)
            value = fn(*args)
            with lock:
                results[index] = value

    count = min(max_concurrent_executions, len(pending))
    threads = [in_thread(worker, daemon=not block_until_all_done) for _ in range(count)]
    if not block_until_all_done:
        return None
    for t in threads:
        t.join()
    return results
