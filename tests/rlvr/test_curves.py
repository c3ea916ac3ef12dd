"""curves.png shows what the run measured: panels with a curve, axes labelled, accuracy titled."""

from rlvr.metrics import heldout_summary, plot_curves, plotted_panels


def _math_run() -> list[dict]:
    """A 25-step math run's records, as the quickstart logs them (no tool in the env)."""
    records = [{"step": 0, "eval/accuracy": 0.25, "eval/heldout/tool/episodes_with_call": 0.0}]
    records += [{"step": s, "reward/mean": 0.1, "reward/accuracy": 0.1} for s in range(1, 26)]
    records[-1]["tool/valid_call_rate"] = 1.0  # a stray call at the last step
    records.append({"step": 25, "eval/accuracy": 0.295,
                    "eval/heldout/tool/episodes_with_call": 0.0})
    return records


def test_a_run_without_tools_draws_no_tool_panel():
    keys = [key for key, _, _ in plotted_panels(_math_run())]
    assert keys == ["reward/accuracy", "eval/accuracy"]


def test_a_reward_equal_to_accuracy_gets_one_panel_and_a_different_one_its_own():
    titles = [title for _, title, _ in plotted_panels(_math_run())]
    assert titles[0] == "train accuracy (= mean reward)"
    shaped = [{**r, "reward/mean": 0.5} if "reward/mean" in r else r for r in _math_run()]
    keys = [key for key, _, _ in plotted_panels(shaped)]
    assert keys == ["reward/mean", "reward/accuracy", "eval/accuracy"]


def test_a_tool_run_draws_its_tool_panels():
    records = _math_run() + [{"step": s, "tool/episodes_with_call": s / 30} for s in (1, 2, 3)]
    records.append({"step": 25, "eval/heldout/tool/episodes_with_call": 0.9})
    keys = [key for key, _, _ in plotted_panels(records)]
    assert "tool/episodes_with_call" in keys and "eval/heldout/tool/episodes_with_call" in keys
    assert "tool/valid_call_rate" not in keys  # one point is no curve


def test_the_title_gives_held_out_accuracy_before_and_after(tmp_path):
    assert heldout_summary(_math_run()) == (
        "held-out greedy accuracy 25.0% at step 0 -> 29.5% at step 25 (+4.5 points)")
    assert heldout_summary(_math_run()[:-1]) is None
    assert plot_curves(_math_run(), tmp_path / "curves.png") == tmp_path / "curves.png"
    assert plot_curves([{"step": 1, "reward/mean": 0.5}], tmp_path / "one.png") is None
