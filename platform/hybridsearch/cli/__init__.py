"""The ``hsp`` command line: one module per command group, wired up in :mod:`hybridsearch.cli.main`."""
