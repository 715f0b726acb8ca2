"""A site's journey through the Arm pipeline: every pass that touched it, where it ended, its numbers."""
