"""Tests of the random sources: reproducibility, independence of paths, secure default."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from mechanisms import rng as rng_module
from mechanisms.rng import child_key, child_rng, make_rng, new_release_key, rng_from_key


def _draw(gen: np.random.Generator) -> list[int]:
    return gen.integers(0, 2**62, size=8).tolist()


def test_seeded_stream_is_reproducible() -> None:
    assert _draw(make_rng(7)) == _draw(make_rng(7))


def test_different_seeds_differ() -> None:
    assert _draw(make_rng(7)) != _draw(make_rng(8))
    assert _draw(make_rng(-1)) != _draw(make_rng(1))


def test_secure_default_differs_between_calls() -> None:
    assert _draw(make_rng()) != _draw(make_rng())


def test_numpy_integer_seed_equals_python_int_seed() -> None:
    assert _draw(make_rng(np.int64(5))) == _draw(make_rng(5))


def test_bad_seed_is_refused() -> None:
    with pytest.raises(TypeError, match=r"seed \(True\) must be an int"):
        make_rng(True)
    with pytest.raises(TypeError, match=r"seed \('3'\) must be an int"):
        make_rng("3")


def test_seeded_warning_logged_once(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setattr(rng_module, "_warned_seeded", False)
    with caplog.at_level(logging.WARNING, logger="mechanisms.rng"):
        make_rng(1)
        make_rng(2)
        new_release_key(3)
    messages = [r for r in caplog.records if "NOT for a production" in r.getMessage()]
    assert len(messages) == 1


def test_release_key() -> None:
    assert len(new_release_key()) == 32
    assert new_release_key() != new_release_key()
    assert new_release_key(1) == new_release_key(1)
    assert new_release_key(1) != new_release_key(2)


def test_child_rng_reproducible_and_order_free() -> None:
    key = new_release_key(11)
    first = [_draw(child_rng(key, "measure", level, f"n{level}")) for level in range(4)]
    second = [_draw(child_rng(key, "measure", level, f"n{level}")) for level in reversed(range(4))]
    assert first == list(reversed(second))


def test_child_rng_paths_and_keys_differ() -> None:
    key = new_release_key(11)
    draws = {
        tuple(_draw(child_rng(key, *path)))
        for path in [("measure", 1), ("measure", 2), ("estimate", 1), ("measure",), ()]
    }
    assert len(draws) == 5
    assert _draw(child_rng(key, "a")) != _draw(child_rng(new_release_key(12), "a"))


@pytest.mark.parametrize(
    ("left", "right"),
    [
        (("ab", "c"), ("a", "bc")),
        (("1",), (1,)),
        (("a", ""), ("a",)),
        ((12, 3), (1, 23)),
        (("",), ()),
    ],
)
def test_path_encoding_unambiguous(left: tuple, right: tuple) -> None:
    key = new_release_key(3)
    assert rng_module._encode_path(left) != rng_module._encode_path(right)
    assert _draw(child_rng(key, *left)) != _draw(child_rng(key, *right))


def test_child_rng_bad_arguments() -> None:
    with pytest.raises(TypeError, match=r"path\[1\]"):
        child_rng(new_release_key(1), "a", 1.5)
    with pytest.raises(ValueError, match=r"key \(length 3\)"):
        child_rng(b"abc", "a")
    with pytest.raises(TypeError, match="key"):
        child_rng("not bytes", "a")


def test_child_key_is_the_key_of_child_rng() -> None:
    """A task carries ``child_key(key, *path)``; its stream is ``child_rng(key, *path)``."""
    key = new_release_key(4)
    derived = child_key(key, "measure", 2, "detailed", 13, 5)
    assert len(derived) == 32 and derived != key
    assert _draw(rng_from_key(derived)) == _draw(child_rng(key, "measure", 2, "detailed", 13, 5))
    assert derived != child_key(key, "measure", 2, "detailed", 13, 6)
    with pytest.raises(ValueError, match=r"key \(length 16\) must be 32 bytes"):
        rng_from_key(key[:16])
    with pytest.raises(TypeError, match=r"key \(str\) must be bytes"):
        rng_from_key("x" * 32)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"key \(length 3\)"):
        child_key(b"abc", "a")
