"""Tributary: the composition root (command-line entry points) over wire, server, controller and clients."""

__version__ = "0.1.0"
