"""Integrations with training frameworks: :class:`GradianCallback` records the training gradients `gradian attribute`
needs while an HF ``Trainer`` / TRL ``SFTTrainer`` trains (imports transformers)."""

from gradian.integrations.callback import GradianCallback

__all__ = ["GradianCallback"]
