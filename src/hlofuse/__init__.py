"""hlofuse: XLA's operator-fusion compiler re-implemented in Python."""

__version__ = "0.1.0"
