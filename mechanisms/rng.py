"""Random sources for the exact samplers: secure by default, reproducible on request.

Every privacy-relevant random draw in the project comes from a ``numpy.random.Generator``
built here. Three entry points:

* :func:`make_rng` gives one stream: ChaCha12 keyed with 256 bits from the operating system
  (the default, for production) or keyed from an integer seed (tests and experiments only).
* :func:`new_release_key` gives the 32-byte secret from which all streams of a release derive.
* :func:`child_rng` derives an independent stream from a release key and a path such as
  ``("measure", level, node_label)``. Each tree node draws its noise from its own stream, so
  the published numbers do not depend on the order in which nodes are processed, on the number
  of worker processes, or on which machine of a cluster ran the task.
* :func:`child_key` is the key of that stream and :func:`rng_from_key` the stream of a key:
  ``rng_from_key(child_key(key, *path))`` is ``child_rng(key, *path)``. A task sent to another
  process carries the derived key of its own stream, never the release key (from which every
  other stream of the release would follow).

Why ChaCha with 12 rounds. The exact samplers read the generator's raw 64-bit words
(:mod:`mechanisms._kernels`), about 0.3-1.6 words per sample, so the source's speed is a
visible part of a sample's cost. Measured side by side (``benchmarks/bench_samplers.py``, raw
words per CPU-second on the 2-core development VM): ChaCha20 about 50M, ChaCha12 about 80M,
ChaCha8 about 140M, AES-CTR about 340M (AES-NI). The choice, by security first:

* ChaCha12 keeps everything ChaCha20 gave: a 256-bit key (the HMAC-SHA256 output of
  :func:`child_rng`, unchanged), constant time without hardware support, the same stream on
  every platform. The best published attacks on ChaCha reach 7 rounds (Aumasson, Fischer,
  Khazaei, Meier, Rechberger, "New Features of Latin Dances", FSE 2008, and the later
  refinements of the same differential-linear approach, all near 2**220 work or more);
  none reaches 8. Twelve rounds leave a margin of five rounds over the best attack. It is the
  generator behind Rust's ``rand::rngs::StdRng`` for the same reasons, and Aumasson's "Too
  Much Crypto" (2019) argues that 8 rounds would be enough.
* AES-CTR is faster still with AES-NI, but randomgen's ``AESCounter`` takes a 128-bit key
  (half the HMAC output would be dropped), and without AES-NI its table-based software path is
  neither fast nor constant-time: the speed and the side-channel story would depend on the
  machine that runs the release.

So ChaCha12. A seeded stream's words differ from ChaCha20's: seeded releases changed once with
the compiled samplers (README changelog).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import operator
import secrets
import threading
from typing import SupportsIndex

import numpy as np
import randomgen

__all__ = ["make_rng", "new_release_key", "child_rng", "child_key", "rng_from_key"]

logger = logging.getLogger(__name__)

_ROUNDS = 12  # see the module docstring
_SEED_DOMAIN = b"topdown-dp/make_rng/v1\x00"
_KEY_DOMAIN = b"topdown-dp/new_release_key/v1\x00"
_warned_seeded = False
_warn_lock = threading.Lock()


def _generator_from_key(key: bytes) -> np.random.Generator:
    """Wrap a 32-byte key in a ChaCha12 bit generator (counter 0) and a numpy Generator."""
    bit_gen = randomgen.ChaCha(key=int.from_bytes(key, "little"), counter=0, rounds=_ROUNDS)
    return np.random.Generator(bit_gen)


def _encode_int(value: object, name: str) -> bytes:
    """Canonical bytes of an integer (bools refused: ``True`` is not the seed ``1``)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} ({value!r}) must be an int, not a bool")
    if isinstance(value, int):  # the common case first: a Protocol isinstance costs ~5 us
        as_int = operator.index(value)  # a plain int, also for int subclasses
    elif isinstance(value, SupportsIndex):  # numpy integers
        as_int = operator.index(value)
    else:
        raise TypeError(f"{name} ({value!r}) must be an int")
    text = str(as_int).encode("ascii")
    return len(text).to_bytes(4, "big") + text


def _warn_seeded_once() -> None:
    """Log, once per process, that a seeded stream is not a production random source."""
    global _warned_seeded
    with _warn_lock:
        if _warned_seeded:
            return
        _warned_seeded = True
    logger.warning(
        "a seeded random source is reproducible by anyone who knows the seed: "
        "use it for tests and experiments, NOT for a production release"
    )


def make_rng(seed: int | None = None) -> np.random.Generator:
    """Return a ChaCha12-backed numpy Generator.

    Args:
        seed: ``None`` (default) keys the stream with 256 bits from ``secrets`` (the OS
            CSPRNG): use this for releases. An integer gives a reproducible stream whose key
            is SHA-256 of a domain-separated encoding of the seed; it is NOT for production,
            since anyone who knows or guesses the seed can reproduce the noise. A warning is
            logged the first time a seeded stream is made in a process.

    Raises:
        TypeError: if ``seed`` is neither ``None`` nor an integer.
    """
    if seed is None:
        return _generator_from_key(secrets.token_bytes(32))
    encoded = _encode_int(seed, "seed")
    _warn_seeded_once()
    return _generator_from_key(hashlib.sha256(_SEED_DOMAIN + encoded).digest())


def new_release_key(seed: int | None = None) -> bytes:
    """Return the 32-byte secret key from which every stream of one release derives.

    Args:
        seed: ``None`` draws the key with ``secrets.token_bytes`` (production). An integer
            gives SHA-256 of a domain-separated encoding of the seed (tests only; the domain
            separation keeps it different from the key :func:`make_rng` derives from the
            same seed).

    Raises:
        TypeError: if ``seed`` is neither ``None`` nor an integer.
    """
    if seed is None:
        return secrets.token_bytes(32)
    encoded = _encode_int(seed, "seed")
    _warn_seeded_once()
    return hashlib.sha256(_KEY_DOMAIN + encoded).digest()


def _encode_path(path: tuple[object, ...]) -> bytes:
    """Encode a path so that distinct paths never share an encoding.

    Each element is a type tag (``s`` for str, ``i`` for int) followed by a 4-byte length and
    its bytes (UTF-8 text, or the decimal digits of the int), and the element count comes
    first. So ``("ab", "c")``, ``("a", "bc")``, ``("1",)`` and ``(1,)`` all differ.
    """
    parts = [len(path).to_bytes(4, "big")]
    for position, element in enumerate(path):
        if isinstance(element, str):
            data = element.encode("utf-8")
            parts.append(b"s" + len(data).to_bytes(4, "big") + data)
        else:
            parts.append(b"i" + _encode_int(element, f"path[{position}]"))
    return b"".join(parts)


def child_key(key: bytes, *path: str | int) -> bytes:
    """Return the 32-byte key of the stream ``child_rng(key, *path)``: HMAC-SHA256(``key``,
    canonical encoding of ``path``). The release key cannot be recovered from it, nor the key
    of any other path.

    Raises:
        TypeError: if ``key`` is not bytes or a path element is neither str nor int.
        ValueError: if ``key`` is shorter than 16 bytes.
    """
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"key ({type(key).__name__}) must be bytes")
    if len(key) < 16:
        raise ValueError(f"key (length {len(key)}) must be at least 16 bytes")
    return hmac.digest(bytes(key), _encode_path(path), "sha256")


def rng_from_key(key: bytes) -> np.random.Generator:
    """Return the stream of a derived key (:func:`child_key`): ChaCha20 keyed with it.

    Raises:
        TypeError: if ``key`` is not bytes.
        ValueError: if ``key`` is not 32 bytes long.
    """
    if not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"key ({type(key).__name__}) must be bytes")
    if len(key) != 32:
        raise ValueError(f"key (length {len(key)}) must be 32 bytes (a child_key)")
    return _generator_from_key(bytes(key))


def child_rng(key: bytes, *path: str | int) -> np.random.Generator:
    """Return the stream for one piece of work, e.g. ``child_rng(key, "measure", 3, "06037")``.

    The ChaCha12 key of the stream is HMAC-SHA256(``key``, canonical encoding of ``path``),
    so streams for different paths are computationally independent, and the stream for a path
    is the same whichever process asks for it and in whatever order. Cost: about 30 us per
    call (HMAC ~3 us; most of the rest is randomgen's ChaCha constructor).

    Args:
        key: the release key (at least 16 bytes; :func:`new_release_key` gives 32).
        *path: strings and integers naming the work (numpy integers accepted).

    Raises:
        TypeError: if ``key`` is not bytes or a path element is neither str nor int.
        ValueError: if ``key`` is shorter than 16 bytes.
    """
    return _generator_from_key(child_key(key, *path))
