"""Rank-free rules of the result pool (fuseopt/core/output_pool.py): a result is
handed out again only when nothing but the pool refers to it."""
import numpy as np
import pytest

from fuseopt.core import output_pool


@pytest.fixture(autouse=True)
def empty_pool():
    output_pool.clear()
    yield
    output_pool.clear()


def take(key="a", nbytes=400, storage_free=None):
    return output_pool.take(key, nbytes, lambda: np.zeros(100, np.float32), storage_free)


def test_a_released_result_is_handed_out_again():
    first = take()
    address = first.__array_interface__["data"][0]
    del first
    assert take().__array_interface__["data"][0] == address


def test_a_held_result_is_not_reused():
    first = take()
    second = take()
    assert first is not second
    assert not np.shares_memory(first, second)


def test_a_view_keeps_its_base_from_reuse():
    first = take()
    view = first[10:20]
    del first
    second = take()
    assert not np.shares_memory(view, second)


def test_storage_check_can_refuse_reuse():
    first = take(storage_free=lambda r: False)
    address = first.__array_interface__["data"][0]
    del first
    assert take(storage_free=lambda r: False).__array_interface__["data"][0] != address


def test_keys_do_not_mix():
    first = take("a")
    del first
    assert take("b") is not take("a")


def test_at_most_two_kept_per_key_and_a_caller_keeps_an_evicted_one():
    held = [take() for _ in range(3)]  # the first is dropped from the pool, not freed
    held[0][:] = 7
    del held[1:]
    again = [take(), take()]
    assert all(not np.shares_memory(held[0], r) for r in again)
    assert (held[0] == 7).all()


def test_nothing_is_kept_past_the_byte_cap(monkeypatch):
    monkeypatch.setattr(output_pool, "MAX_BYTES", 1000)
    first = take(nbytes=800)
    address = first.__array_interface__["data"][0]
    take("b", nbytes=800)  # would pass the cap: made, not kept
    assert "b" not in output_pool._pool
    del first
    assert take(nbytes=800).__array_interface__["data"][0] == address


def test_unshared_sees_a_second_holder():
    kept = [np.zeros(4)]
    for result in kept:
        assert output_pool.unshared(result)
        other = result
        assert not output_pool.unshared(result)
        del other
        view = result[1:]
        assert not output_pool.unshared(result)
        del view
        assert output_pool.unshared(result)
