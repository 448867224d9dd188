"""Data sets the platform reads from standard on-disk formats (never from a hub at run time)."""
