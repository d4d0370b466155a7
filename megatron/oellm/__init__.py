"""megatron-oellm: the OpenEuroLLM distribution of Megatron-LM (a namespace portion beside ``megatron.core``).

Importing this package applies the Python 3.11 provision (see :mod:`megatron.oellm.compat`) so that
``megatron.training`` can be imported afterwards on Python 3.11 as well as 3.12.
"""

from megatron.oellm.compat import provide_typing_override

__version__ = "0.2.0.dev0"
MEGATRON_CORE_VERSION = "0.19.2"
"""The one megatron-core release this package is written and tested against."""

provide_typing_override()

__all__ = ["__version__", "MEGATRON_CORE_VERSION"]
