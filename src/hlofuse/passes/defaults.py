"""The pipeline `hlofuse.compile`, `hlofuse.jit` and the CLI's run/emit use, and so the one
`explain` and `viz` show unless told otherwise. (A module of its own: importing it loads no
pass, so a process that runs a cached program imports no fusion code.)"""

DEFAULT_PIPELINE = "hlofuse"
