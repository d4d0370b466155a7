"""One module per ``oellm`` subcommand (see :mod:`megatron.oellm.cli`)."""
