import copy

import gymnasium
import pytest


@pytest.fixture
def clean_registry():
    """Restore gymnasium's registry after a test that registers ids."""
    saved = copy.copy(gymnasium.registry)
    yield gymnasium.registry
    for env_id in list(gymnasium.registry):
        if env_id not in saved:
            del gymnasium.registry[env_id]
