"""Restated parts of LLaVA-OneVision-2's trainer package (tests/trainers/README.md)."""
