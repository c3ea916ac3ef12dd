import copy

import gymnasium
import pytest


@pytest.fixture
def clean_registry():
    """Restore gymnasium's registry after a test that registers ids.

    ``envs`` is imported first, so the built-in ids it registers on import stay registered even
    when the test is the first to import it (e.g. run alone or first in a selection).
    """
    from rlvr import envs  # noqa: F401  (registers the rlvr/* ids)

    saved = copy.copy(gymnasium.registry)
    yield gymnasium.registry
    for env_id in list(gymnasium.registry):
        if env_id not in saved:
            del gymnasium.registry[env_id]
