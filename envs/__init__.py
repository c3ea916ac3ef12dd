"""Gymnasium text environments over chat messages, registered under the ``rlvr/`` namespace.

Importing this package registers the built-in ids (``rlvr/Math-v0``, ``rlvr/Code-v0``,
``rlvr/ToolUse-v0``) with gymnasium; :func:`make` builds one by id with helpful errors.
"""

from rlvr.envs.agent_env import AgentEnv, AgentTask, register_agent
from rlvr.envs.base import Message, TextEnv
from rlvr.envs.check import CheckReport, CheckResult, check_env, task_reference
from rlvr.envs.code_env import CodeEnv
from rlvr.envs.errors import (
    EnvArgumentError,
    EnvCheckError,
    EnvError,
    EpisodeOverError,
    MissingDependencyError,
    PluginImportError,
    ResetNeededError,
    SuiteError,
    TaskSourceError,
    ToolSchemaError,
    UnknownEnvError,
)
from rlvr.envs.math_env import MathEnv
from rlvr.envs.registration import (
    BUILTIN_ENVS,
    NAMESPACE,
    import_plugins,
    list_envs,
    make,
    register_builtins,
)
from rlvr.envs.spaces import ChatMessages, FreeText
from rlvr.envs.suites import Suite, SuiteEntry, list_suites, load_suite
from rlvr.envs.task_env import TaskEnv
from rlvr.envs.tasks import (
    ArithmeticSource,
    BundledCodeSource,
    DatasetSource,
    FactTaskSource,
    HumanEvalSource,
    ListSource,
    Task,
    TaskSource,
    resolve_source,
)
from rlvr.envs.tool_env import ToolUseEnv
from rlvr.envs.tools import Tool, Toolset, function_schema
from rlvr.envs.verifier_env import Verifier, VerifierEnv

register_builtins()

__all__ = [
    "AgentEnv",
    "AgentTask",
    "BUILTIN_ENVS",
    "NAMESPACE",
    "ArithmeticSource",
    "BundledCodeSource",
    "ChatMessages",
    "CheckReport",
    "CheckResult",
    "CodeEnv",
    "DatasetSource",
    "EnvArgumentError",
    "EnvCheckError",
    "EnvError",
    "EpisodeOverError",
    "FactTaskSource",
    "FreeText",
    "HumanEvalSource",
    "ListSource",
    "MathEnv",
    "Message",
    "MissingDependencyError",
    "PluginImportError",
    "ResetNeededError",
    "Suite",
    "SuiteEntry",
    "SuiteError",
    "Task",
    "TaskEnv",
    "TaskSource",
    "TaskSourceError",
    "TextEnv",
    "Tool",
    "ToolSchemaError",
    "ToolUseEnv",
    "Toolset",
    "UnknownEnvError",
    "Verifier",
    "VerifierEnv",
    "check_env",
    "function_schema",
    "import_plugins",
    "register_agent",
    "list_envs",
    "list_suites",
    "load_suite",
    "make",
    "register_builtins",
    "resolve_source",
    "task_reference",
]

if __name__ != "rlvr.envs":  # this folder installs and imports as rlvr.envs only
    raise ImportError(
        f"rlvr's envs package imports as `rlvr.envs`, not as `{__name__}`: write "
        f"`from rlvr.envs import ...` (a second copy of its modules would split their state)")
