"""Gymnasium text environments over chat messages, registered under the ``rlvr/`` namespace."""

from envs.base import Message, TextEnv

__all__ = ["Message", "TextEnv"]
