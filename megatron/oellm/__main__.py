"""``python -m megatron.oellm``: the same as the ``oellm`` console script."""

import sys

from megatron.oellm.cli import main

sys.exit(main())
