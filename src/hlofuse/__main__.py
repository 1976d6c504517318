"""`python -m hlofuse`: the command line (`cli.py`)."""

from hlofuse.cli import main

raise SystemExit(main())
