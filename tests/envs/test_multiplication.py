import pytest

from rlvr.envs import TaskSourceError
from rlvr.envs.tasks import MultiplicationSource, resolve_source
from rlvr.envs.tasks.multiplication import in_test_split


def test_products_have_the_asked_digits_and_are_right():
    source = MultiplicationSource("train", n_tasks=300, digits=(3, 2), seed=1)
    assert len(source) == 300
    for i in range(len(source)):
        task = source[i]
        a, b = task["expression"].split("*")
        assert (len(a), len(b)) == (3, 2) and a[0] != "0" and b[0] != "0"
        assert int(task["answer"]) == int(a) * int(b)
        assert task["task_id"] == f"mul:{task['expression']}" == f"mul:{task['question']}"


def test_splits_are_disjoint_whatever_the_seed():
    train = {MultiplicationSource("train", n_tasks=2000, seed=s)[i]["expression"]
             for s in (0, 1) for i in range(2000)}
    test = {MultiplicationSource("test", n_tasks=200, seed=s)[i]["expression"]
            for s in (0, 3) for i in range(200)}
    assert not train & test
    assert all(in_test_split(e, 0.1) for e in test)


def test_seeded_and_template():
    a = MultiplicationSource("test", n_tasks=5, seed=2, template="What is {expression}?")
    b = MultiplicationSource("test", n_tasks=5, seed=2)
    assert [a[i]["expression"] for i in range(5)] == [b[i]["expression"] for i in range(5)]
    assert a[0]["question"] == f"What is {a[0]['expression']}?"


def test_resolved_by_name_from_yaml_lists():
    source = resolve_source("multiplication", split="test",
                            source_kwargs={"n_tasks": 10, "digits": [2, 2]})
    assert isinstance(source, MultiplicationSource) and source.digits == (2, 2)


@pytest.mark.parametrize("kwargs, match", [
    ({"digits": (3,)}, "digits must be a list"),
    ({"digits": "32"}, "digits must be a list"),
    ({"digits": (3, 0)}, "1..9"),
    ({"n_tasks": 0}, "n_tasks"),
    ({"test_fraction": 1.0}, "test_fraction"),
    ({"template": "no slot"}, "template"),
    ({"digits": (1, 1), "n_tasks": 500}, "only"),
])
def test_bad_arguments_are_named(kwargs, match):
    with pytest.raises(TaskSourceError, match=match):
        MultiplicationSource("train", **kwargs)
