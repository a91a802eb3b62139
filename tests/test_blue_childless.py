"""The childless precisions' inverses, checked and inverted once per process: the same numbers
as the stack's ``inv`` and ``eigvalsh`` (bit for bit), computed once per distinct matrix, a
matrix that is not positive definite refused every time, and the held bytes bounded."""

from __future__ import annotations

import numpy as np
import pytest

from topdown.blue import childless
from topdown.blue.childless import childless_inverses

LARGE = 400  # 1.28 MB a matrix: above SMALL_BYTES, so held
SMALL = 6


@pytest.fixture(autouse=True)
def _empty():
    childless.clear()
    yield
    childless.clear()


@pytest.fixture
def computed(monkeypatch):
    """Counts the checks and inverses actually computed, a matrix at a time."""
    calls: list[int] = []
    plain = childless._checked

    def counted(pi):
        calls.extend([pi.shape[1]] * len(pi))
        return plain(pi)

    monkeypatch.setattr(childless, "_checked", counted)
    return calls


def _precisions(k: int, n: int, seed: int) -> np.ndarray:
    a = np.random.default_rng(seed).standard_normal((n, k, k))
    return a @ np.swapaxes(a, 1, 2) + np.eye(k)


@pytest.mark.parametrize("k", [SMALL, LARGE])
def test_the_same_numbers_as_the_stack_held_or_not(k, computed):
    pi = _precisions(k, 3, seed=k)
    want = np.linalg.inv(pi)
    for _ in range(2):  # the second time from what was kept (large) or computed again
        got, bad = childless_inverses(pi)
        assert np.array_equal(got, want)  # bit for bit
        assert not bad.any()
        got[:] = 0.0  # the result is the caller's: writing in it changes nothing kept
    assert len(computed) == (6 if k == SMALL else 3)


def test_one_computation_per_distinct_matrix(computed):
    pi = _precisions(LARGE, 2, seed=1)
    childless_inverses(pi[[0, 1, 0]])
    childless_inverses(pi[[1]])
    assert len(computed) == 2
    childless_inverses(pi[[0]] * 2.0)  # another matrix: computed
    assert len(computed) == 3


@pytest.mark.parametrize("k", [SMALL, LARGE])
def test_not_positive_definite_refused_every_time(k, computed):
    pi = _precisions(k, 2, seed=3)
    v = np.ones(k) / np.sqrt(k)
    pi[1] = pi[1] - (v @ pi[1] @ v) * np.outer(v, v)  # nothing measured along v
    pi[1] = 0.5 * (pi[1] + pi[1].T)
    assert np.linalg.eigvalsh(pi[1])[0] <= 1e-12 * np.linalg.eigvalsh(pi[1])[-1]
    for _ in range(2):
        got, bad = childless_inverses(pi)
        assert bad.tolist() == [False, True]
        assert np.array_equal(got[0], np.linalg.inv(pi[0]))
        assert not got[1].any()
    assert len(computed) == (4 if k == SMALL else 2)


def test_held_bytes_bounded_least_recent_dropped(monkeypatch, computed):
    one = LARGE * LARGE * 8
    monkeypatch.setattr(childless, "HELD_BYTES", 2 * one)
    a, b, c = _precisions(LARGE, 3, seed=5)
    for m in (a, b, a, c):  # c drops b, the least recently used
        childless_inverses(m[None])
    assert len(computed) == 3
    childless_inverses(a[None])  # still held
    assert len(computed) == 3
    childless_inverses(b[None])  # dropped: computed again
    assert len(computed) == 4
    held = [v for v in childless._held.values() if v is not None]
    assert sum(v.nbytes for v in held) <= 2 * one
    assert all(not v.flags.writeable for v in held)
