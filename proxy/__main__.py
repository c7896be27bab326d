"""`python -m sealtrace` (installed as sealtrace/__main__.py) and `python -m sealtrace.proxy`:
the `sealtrace` command."""

from sealtrace.proxy.cli import main

main()
