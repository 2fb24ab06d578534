"""The one exception type every codec raises on bad input."""


class CodecError(ValueError):
    """A frame (or a vector to encode) is malformed; the message names the problem."""
