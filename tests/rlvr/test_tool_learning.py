"""The multi-turn tool path learns: a small-budget run of the tool quickstart's recipe.

Both tests start from one warm-up (the built-in env's run, module-scoped): the built-in env's RL,
then the same RL with the task played by a plain ``openai``-client agent through the gateway.
"""

import pytest
from tool_learning_budget import NATIVE_AGENT, WINDOW, run_agent_from, run_budget

#: Thresholds (see the test's docstring for where they come from).
MIN_CALL_SHARE_RISE = 0.15
MIN_ACCURACY_RISE = 0.0
#: The agent test's thresholds (see its docstring).
AGENT_MIN_CALL_SHARE_RISE = 0.15
AGENT_MIN_ACCURACY_RISE = 0.0
#: The native-tools agent test's thresholds (see its docstring).
NATIVE_MIN_CALL_SHARE_RISE = 0.15
NATIVE_MIN_ACCURACY_RISE = 0.0


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory):
    """The built-in env's budget run (seed 0); its warm-up is also the agent test's start."""
    out = tmp_path_factory.mktemp("tool_budget")
    return out, run_budget(out, seed=0)


@pytest.mark.slow
def test_rl_teaches_the_warmed_up_model_to_call_the_calculator(builtin_run):
    """RL raises the share of episodes that call the calculator, and training accuracy with it.

    The budget (``tool_learning_budget.BUDGET``): the tool quickstart's staged warm-up (its
    1000-demo pool; stage 1 to a 50% tool-path check on 32 held-out tasks; 40 mixed steps at a
    40% call share, not the quickstart's 15%), then 16 Dr. GRPO steps of 4 prompts x 8 samples at
    temperature 1.0. The
    warmed-up model can call and copy but reaches for the tool in a minority of its samples, and
    only the calls are ever right, so RL moves the first-token decision: the mean call share
    (``tool/episodes_with_call``) and training accuracy of the last ``WINDOW`` (5) steps beat
    those of the first 5.

    Learning curves differ across CPUs, so this asserts only what held with margin for every
    seed measured, never one run's point values. Where the thresholds come from
    (``bench/tool_learning_seeds.py``, BENCHMARKS.md, "The tool quickstart"): seeds 0-4 on this
    project's 2-core machine. Warm-up 290-390 steps in all; the call share rose by +0.36, +0.31,
    +0.31, +0.46, +0.47 (from 0.38-0.53 to 0.74-0.91; 160 episodes per window, a standard error
    of about 0.05 on the difference), so the share threshold, +0.15, is half the smallest rise,
    3 standard errors below it. Training accuracy rose by +0.17, +0.06, +0.18, +0.21, +0.16; the
    smallest is only ~2 standard errors (0.03) above zero, so the test asks only that it rises.
    The valid-call rate did not rise (it starts at 0.86-0.97; changes -0.07 to +0.07) and is
    not asserted. Two torch threads (the tool quickstart's ``trainer.threads: 2``) gave exactly
    the numbers of one thread on all five seeds, in 104-125 s wall per run (161-200 s of CPU)
    on that machine: over the ~90 s asked, because the warm-up must first reach the point where
    the tool path copies (about 250 steps).
    Session 7 (fused AdamW: other rounding, so other runs): the share rose by +0.49, +0.56,
    +0.28, +0.29, +0.33 and training accuracy by +0.26, +0.34, +0.01, +0.24, +0.09. Both
    thresholds hold on every seed; seed 2's accuracy rise is within noise of zero, so the
    accuracy check is the one that may fail on another CPU (seed 0 here: +0.26).
    Session 9 (episodes opened ahead, the runner split; seeds 0-4 again): warm-up 290-390 steps;
    the share rose by +0.49, +0.53, +0.42, +0.38, +0.43 and training accuracy by +0.43, +0.34,
    +0.20, +0.18, +0.29, in 86-123 s wall per run.
    2026-12-03 (inverse-CDF sampler, an AMD EPYC): the share rose by +0.56, +0.49, +0.34, +0.23,
    +0.49 and training accuracy by +0.43, +0.24, +0.04, +0.13, +0.06, in 48-70 s wall per run.
    """
    _, summary = builtin_run
    share_first, share_last = summary["tool/episodes_with_call"]
    acc_first, acc_last = summary["reward/accuracy"]
    assert WINDOW == 5
    assert share_last >= share_first + MIN_CALL_SHARE_RISE, summary
    assert acc_last > acc_first + MIN_ACCURACY_RISE, summary


@pytest.mark.slow
def test_an_openai_client_agent_learns_to_call_the_calculator_through_the_gateway(builtin_run,
                                                                                 tmp_path):
    """``examples/calculator_agent.py`` trained through the gateway learns as the built-in env.

    The agent is ~30 lines against the plain ``openai`` client with its own tool loop;
    ``register_agent`` makes it ``examples/Calculator-v0`` with the built-in env's tasks and
    verifier, and the runner plays every episode through the gateway (an endpoint per episode,
    token-exact capture). The run (``tool_learning_budget.run_agent_from``): the built-in test's
    warm-up (its ``sft_model``: paid once for both tests), then the same 16 Dr. GRPO steps of 4 x
    8. As there, the call share and training accuracy of the last ``WINDOW`` (5) steps beat the
    first 5; and no call of any episode broke the token prefix (``gateway/prefix_breaks`` 0:
    each episode trained as one token-exact row).

    Where the thresholds come from (``bench/tool_learning_seeds.py --agent``, each agent run
    from its own seed's warm-up; the table is in BENCHMARKS.md): 2026-12-06, the project's
    2-core x86_64 box at load 8-16, seeds 0-2. Warm-up 315, 390, 365 steps; for the agent the
    call share rose by +0.512, +0.444, +0.519 (from 0.33-0.44 to 0.84-0.92) and training
    accuracy by +0.475, +0.225, +0.219 (the built-in env from the same warm-ups: share +0.538,
    +0.450, +0.494, accuracy +0.463, +0.269, +0.231); no prefix break in any run. The agent's
    numbers equal those of the earlier runs that warmed up in-process (BENCHMARKS.md, "Agent
    functions through the gateway"). The thresholds are the built-in test's: the share +0.15,
    a third of the smallest rise (its standard error is about 0.05); accuracy only has to rise,
    as the built-in env's rose by as little as +0.04 on other CPUs. The agent run costs
    9.5-10.7 s of CPU (16-26 s wall at that load; the warm-up is shared).
    """
    out, _ = builtin_run
    agent = run_agent_from(out / "sft_model", tmp_path, seed=0)
    share_first, share_last = agent["tool/episodes_with_call"]
    acc_first, acc_last = agent["reward/accuracy"]
    assert agent["prefix_breaks"] == 0, agent
    assert share_last >= share_first + AGENT_MIN_CALL_SHARE_RISE, agent
    assert acc_last > acc_first + AGENT_MIN_ACCURACY_RISE, agent


@pytest.mark.slow
def test_a_native_tools_agent_learns_to_call_the_calculator_through_the_gateway(builtin_run,
                                                                               tmp_path):
    """``examples/native_tools_agent.py`` (``tools=``, ``tool_calls``) learns as the example does.

    The agent passes the env's schemas (``task.tools``) as ``tools=``, reads
    ``message.tool_calls`` and answers each call with a ``tool`` message carrying its
    ``tool_call_id``. The tool quickstart's tiny model renders ``tools`` as the one line the
    built-in env writes (``model.tiny.tool_prompt: line``), so the built-in test's warm-up is
    this agent's too: the same 16 Dr. GRPO steps of 4 x 8 from it. The call share and training
    accuracy of the last ``WINDOW`` (5) steps beat the first 5; each episode is one token-exact
    row (no prefix break; the learner's logprobs equal the engine's).

    Where the thresholds come from (``bench/tool_learning_seeds.py --agent --native``, each run
    from its own seed's warm-up; BENCHMARKS.md, "Agent functions through the gateway"):
    2026-12-07, the project's 2-core x86_64 box at load 5-8, seeds 0-2, with
    ``--override eval.tasks=64``. Warm-up 290, 315, 390 steps; for the native agent the call
    share rose by +0.550, +0.463, +0.294 (from 0.34-0.46 to 0.74-0.93) and training accuracy by
    +0.281, +0.162, +0.075 (the content-parsing agent from the same warm-ups: share +0.544,
    +0.462, +0.287, accuracy +0.250, +0.137, +0.081); no prefix break in any run. The
    thresholds are the content agent's: the share +0.15, half the smallest rise (its standard
    error is about 0.05); accuracy only has to rise. The run costs 17-18 s of CPU (22-35 s
    wall at that load; the warm-up is shared).
    """
    out, _ = builtin_run
    agent = run_agent_from(out / "sft_model", tmp_path, seed=0, agent=NATIVE_AGENT)
    share_first, share_last = agent["tool/episodes_with_call"]
    acc_first, acc_last = agent["reward/accuracy"]
    assert agent["prefix_breaks"] == 0, agent
    assert agent["max_logprob_diff"] is not None and agent["max_logprob_diff"] < 1e-3, agent
    assert share_last >= share_first + NATIVE_MIN_CALL_SHARE_RISE, agent
    assert acc_last > acc_first + NATIVE_MIN_ACCURACY_RISE, agent
