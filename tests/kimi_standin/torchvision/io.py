"""Unused by the Kimi processor on PIL inputs; present because transformers may import it."""
