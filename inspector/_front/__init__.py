"""Front ends: the command line, saved sessions and reproducers for bug reports."""
