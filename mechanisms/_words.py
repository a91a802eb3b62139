"""The raw-word stream the compiled samplers consume, and its Python-int continuation.

:mod:`mechanisms._kernels` reads random bits from a block of the generator's raw 64-bit words
(``BitGenerator.random_raw``, bulk). :class:`WordStream` owns that block and the kernels' bit
state, calls a kernel until it is done, appends words when it asks for more, and finishes with
Python ints the rare candidates whose integers would pass int64 (``BIG``), reading the bits
where the kernel stopped and in the kernels' order (half-words low first, bits low first), with
CKS20's Algorithm 1 in its plain sequential form (exact for integers of any size). The noise is thus
a function of the generator's word stream alone: of the seed or key, not of block sizes,
executors or worker counts.

How many words are drawn: a first block from an estimate of bits per sample, then, if the
kernel asks for more, the rest at the rate observed so far. Words left over at the end of a
call are dropped (the Generator has moved past them): the next call starts on fresh words.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mechanisms._kernels import BIG, DONE, NEED_WORDS, STATE_SIZE

__all__ = ["WordStream", "bit_length_below"]

# the kernel call for one block: (words, state, out, start) -> (status, index, U, V)
Kernel = Callable[[np.ndarray, np.ndarray, np.ndarray, int], tuple[int, int, int, int]]
# finishes a BIG candidate from (U, V) with Python ints: the sample, or None if rejected
Finisher = Callable[["WordStream", int, int], "int | None"]


def bit_length_below(m: int) -> int:
    """Bits a uniform draw on [0, m) takes: bit_length(m - 1) (0 for m = 1)."""
    return (m - 1).bit_length()


class WordStream:
    """A block of a Generator's raw words and the bit position the kernels have reached."""

    def __init__(self, rng: np.random.Generator, first_words: int) -> None:
        self.rng = rng
        self.words = self._draw(max(int(first_words), 1))
        self.state = np.zeros(STATE_SIZE, dtype=np.int64)  # c, h, i, ... as in the kernels
        self.dropped = 0  # words already read and dropped by extend()

    def _draw(self, count: int) -> np.ndarray:
        raw = self.rng.bit_generator.random_raw(count)
        return np.asarray(raw, dtype=np.uint64).view(np.int64)

    def extend(self, count: int) -> None:
        """Append ``count`` fresh words, dropping the words already read completely."""
        st = self.state
        first = int(st[2]) >> 1
        self.words = np.concatenate([self.words[first:], self._draw(max(int(count), 1))])
        st[2] -= 2 * first
        self.dropped += first

    # ------------------------------------------------------------ Python-int reader

    def _half(self) -> int:
        st = self.state
        if int(st[2]) >= 2 * self.words.size:
            self.extend(64)
        index = int(st[2])
        st[2] = index + 1
        return (int(self.words[index >> 1]) >> (32 * (index & 1))) & 0xFFFFFFFF

    def bit(self) -> int:
        """One bit, as the kernels' ``_bit``."""
        st = self.state
        if st[1] == 0:
            st[0] = self._half()
            st[1] = 32
        bit = int(st[0]) & 1
        st[0] >>= 1
        st[1] -= 1
        return bit

    def bits(self, k: int) -> int:
        """k bits as an integer, the first read lowest, as the kernels' ``_bits``."""
        value = 0
        for j in range(k):
            value |= self.bit() << j
        return value

    def bernoulli(self, r: int, d: int) -> bool:
        """Bernoulli(r/d), any size of r >= 0 and d >= 1, as the kernels' ``_bernoulli_bits``."""
        if r >= d:
            return True
        x = r
        while x != 0:
            x <<= 1
            digit = 0
            if x >= d:
                digit = 1
                x -= d
            if self.bit() != digit:
                return digit == 1
        return False

    def bern_exp(self, num: int, den: int) -> bool:
        """Bernoulli(exp(-num/den)) with Python ints (CKS20 Algorithm 1, sequential K loops).

        The fractional part first, then one Bernoulli(exp(-1)) per unit of the whole part,
        stopping at the first failure (so a huge whole part costs a few coins, not a loop).
        """
        whole, rem = divmod(num, den)
        if self.bernoulli(rem, den):
            k = 2
            while self.bernoulli(1, k) and self.bernoulli(rem, den):
                k += 1
            if k % 2 == 0:
                return False
        for _ in range(whole):
            k = 2
            while self.bernoulli(1, k):
                k += 1
            if k % 2 == 0:
                return False
        return True

    # ------------------------------------------------------------ driving a kernel

    def run(self, kernel: Kernel, out: np.ndarray, finish: Finisher) -> dict[int, int]:
        """Fill ``out`` by calling ``kernel`` until done; returns the BIG samples by index.

        A BIG sample that fits int64 is written into ``out`` too; one that does not is only
        in the returned dict (the caller then returns an object array).
        """
        big: dict[int, int] = {}
        i = 0
        while True:
            status, i, u, v = kernel(self.words, self.state, out, i)
            if status == DONE:
                return big
            if status == NEED_WORDS:
                used = self.dropped + int(self.state[2]) // 2 + 1
                self.extend((out.size - i) * used // max(i, 1) * 41 // 40 + 16)
            elif status == BIG:
                value = finish(self, u, v)
                if value is not None:
                    if -(2**63) <= value < 2**63:
                        out[i] = value
                    else:
                        big[i] = value
                    i += 1
            else:  # pragma: no cover - the kernels return only the three statuses
                raise RuntimeError(f"kernel status ({status}) is unknown")
