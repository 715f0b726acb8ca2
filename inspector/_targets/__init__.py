"""What the user points at: a module, an exported program, a sample name or an untrusted ``.pt2``
archive (read by ``pt2`` without running code), loaded once into a ``Target``."""
