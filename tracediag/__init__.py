"""tracediag: why is this ML accelerator job slow? Critical path, stalls and what fixing them saves."""

__version__ = "0.1.0"
