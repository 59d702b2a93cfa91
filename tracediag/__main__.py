"""``python -m tracediag``: the same as the ``tracediag`` command."""

from tracediag.cli.main import entry

if __name__ == "__main__":
    entry()
