"""The version of this aiopgq, in one place (the package, the workers registry)."""

__version__ = "0.1.0"
