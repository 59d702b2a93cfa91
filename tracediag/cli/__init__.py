"""The ``tracediag`` command line: one module per subcommand, :func:`main.main` runs one."""
