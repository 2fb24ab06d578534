"""Testbed backends: Docker engine helpers, images, compose runs, link shaping in namespaces."""
