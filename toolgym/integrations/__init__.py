"""Adapters that hand a toolgym environment to other trainers (TRL's `GRPOTrainer`: `toolgym.integrations.trl`).

Each adapter imports its trainer lazily, so `import toolgym.integrations` costs nothing without the extra."""
