"""Settings, the composition root (``memesh serve``), the CLI and cluster launch files."""
