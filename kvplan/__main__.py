"""``python -m kvplan``: the command line, as the ``kvplan`` script runs it."""

from kvplan.cli.main import main

main()
