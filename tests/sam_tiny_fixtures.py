"""Plugin module for ``pytest_plugins = ["tests.sam_tiny_fixtures"]``: registers the session fixture once.

Importing the fixture into each test file instead would give every file its own definition, hence its
own session instance and its own export; and registering ``tests.sam_tiny`` itself as the plugin warns
(it is already imported for its helpers when pytest would assert-rewrite it).
"""

from tests.sam_tiny import TinySamArtifacts, tiny_sam_artifacts

__all__ = ["TinySamArtifacts", "tiny_sam_artifacts"]
