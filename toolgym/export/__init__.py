"""Export a toolgym environment to other ecosystems: `toolgym export verifiers ENV OUT` (see `verifiers.py`)."""
