"""Runnable examples: `python -m pyautodiff.examples.<name>`."""
