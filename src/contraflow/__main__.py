"""`python -m contraflow` is the `contraflow` command."""

from contraflow.cli import main

main()
