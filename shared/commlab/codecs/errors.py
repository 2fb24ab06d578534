"""The one exception type every codec raises on bad input, and the checks of integer parameters."""


class CodecError(ValueError):
    """A frame (or a vector to encode) is malformed; the message names the problem."""


def integer_in(what: str, value: object, lo: int, hi: int) -> int:
    """`value` if it is an integer in lo..hi, else a CodecError naming `what`."""
    if not isinstance(value, int) or not lo <= value <= hi:
        raise CodecError(f"{what} must be an integer in {lo}..{hi}, got {value!r}")
    return value


def chunk_size(what: str, value: object) -> int:
    """`value` if it is a chunk (or bucket) size the wire can carry, [1, 2**32), else a CodecError."""
    if not isinstance(value, int) or not 1 <= value < 2**32:
        raise CodecError(f"{what} must be an integer in [1, 2**32), got {value!r}")
    return value
