"""The one exception type of checkpoint conversion."""


class ConversionError(ValueError):
    """A checkpoint cannot be converted: missing tensor, wrong shape, bad path. The message names the tensor/fix."""
