"""Deciding sites: the pipeline stages, regions around a site, the decider and the ``Analysis`` record."""
