"""What the dense float codecs share (fp32, fp16, bf16): no parameters, every value as one
little-endian word of a fixed width, summable in transit (DDP allreduces them: exchange
ALLREDUCE). The decoder rejects a payload whose length is not numel words; the 16-bit formats also
refuse, both ways, any word with an all-ones exponent (Inf or NaN)."""
from __future__ import annotations

import struct
from abc import abstractmethod
from typing import ClassVar

import numpy as np

from commlab.codecs.base import ALLREDUCE, Codec
from commlab.codecs.errors import CodecError


class FloatWords(Codec):
    params_struct = struct.Struct("<")
    exchange = ALLREDUCE
    width: ClassVar[int]  # bytes a value

    def _decode(self, numel: int, params: tuple, payload: memoryview) -> np.ndarray:
        if len(payload) != self.width * numel:
            raise CodecError(f"{self.name}: payload {len(payload)} bytes, {numel} elements need {self.width * numel}")
        return self._values(payload)

    @abstractmethod
    def _values(self, payload: memoryview) -> np.ndarray:
        """float32 values of a payload of the right length; validates its words."""

    def payload_size(self, numel: int) -> int:
        return self.width * numel


class HalfWords(FloatWords):
    """A 16-bit float format, converted on the bits of whole arrays."""
    lossy = True
    width = 2
    exponent: ClassVar[np.uint16]  # the format's exponent bits: all ones is Inf or NaN
    unrepresentable: ClassVar[str]  # which values have no finite word

    def _encode(self, vec: np.ndarray) -> tuple[tuple, list]:
        words = self._narrow(vec)
        if ((words & self.exponent) == self.exponent).any():
            raise CodecError(f"{self.name}: {self.unrepresentable}")
        return (), [words]

    def _values(self, payload: memoryview) -> np.ndarray:
        words = np.frombuffer(payload, "<u2")
        if ((words & self.exponent) == self.exponent).any():
            raise CodecError(f"{self.name}: frame holds Inf or NaN")
        return self._widen(words)

    @abstractmethod
    def _narrow(self, vec: np.ndarray) -> np.ndarray:
        """float32 -> the format's words (uint16)."""

    @abstractmethod
    def _widen(self, words: np.ndarray) -> np.ndarray:
        """The format's words, none Inf or NaN -> float32, exactly."""
