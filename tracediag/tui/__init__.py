"""The terminal UI (Textual): the front-end that drills from a finding to the events behind it.

Import :func:`tracediag.tui.app.make_app` for the app; this package imports no Textual itself, so
the CLI can register its ``tui`` command without loading the toolkit.
"""
