from fractions import Fraction

import pytest

from rlvr.envs.calculator import CalculatorError, evaluate, format_number


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("12+7", "19"),
        ("(43645 + 20972) * 2", "129234"),
        ("7/2", "3.5"),
        ("1/3", "0.333333333333"),
        ("2**10", "1024"),
        ("2^10", "1024"),
        ("-3 - -4", "1"),
        ("17 // 5 + 17 % 5", "5"),
        ("sqrt(16) + abs(-2)", "6"),
        ("max(3, 9, 4) - min(2, 8)", "7"),
        ("round(2.6)", "3"),
        ("1.5 * 4", "6"),
        ("2 ** -2", "0.25"),
    ],
)
def test_results(expression, expected):
    assert format_number(evaluate(expression)) == expected


def test_integers_stay_exact():
    assert evaluate("10**20 + 1 - 10**20") == Fraction(1)
    assert evaluate("1/3 + 2/3") == Fraction(1)


@pytest.mark.parametrize(
    ("expression", "needle"),
    [
        ("__import__('os').system('true')", "unknown function|not allowed"),
        ("().__class__", "not allowed"),
        ("open('/etc/passwd')", "unknown function"),
        ("x + 1", "unknown name 'x'"),
        ("'a' * 3", "only numbers"),
        ("True + 1", "only numbers"),
        ("[1, 2]", "not allowed"),
        ("lambda: 1", "not allowed"),
        ("9**9**9", "exponent|too large"),
        ("2**100000", "exponent"),
        ("10**1000 * 10**1000 * 10**1000 * 10**1000 * 10**1000", "too large"),
        ("1e308 * 10", "too large"),
        ("1/0", "division by zero"),
        ("(-8) ** 0.5", "not real"),
        ("(" * 400 + "1" + ")" * 400, "valid expression|deeper"),
        ("1+" * 600 + "1", "longer than"),
        ("", "empty"),
        ("1 +", "valid expression"),
        ("sqrt(-1)", "sqrt"),
        ("0 ** -1", "division by zero"),
    ],
)
def test_refusals(expression, needle):
    with pytest.raises(CalculatorError, match=needle):
        evaluate(expression)


def test_nesting_guard():
    with pytest.raises(CalculatorError, match="deeper"):
        evaluate("-" * 200 + "1")


@pytest.mark.parametrize("expression", ["1if 2 else 3", "2or 3", "3in [3]", "1and 2",
                                        "0x1for 2", "'\\d' * 2"])
def test_what_python_warns_about_is_refused_without_a_warning_on_stderr(expression):
    """Python's parser prints ``SyntaxWarning: invalid decimal literal`` for ``1if`` on every
    call; a model writing such calls each episode flooded the run's output."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CalculatorError, match="valid expression"):
            evaluate(expression)
    assert not caught, [str(w.message) for w in caught]


@pytest.mark.parametrize("expression", ["'''", '"""abc', "\x00", "1\x00", " 1\n 2", "1\n\t2",
                                        "(" * 999, "\\", "1\\\n", "1_", "0b12", "1..2", "#",
                                        "1\r\n+2", "1;2"])
def test_input_that_breaks_the_tokenizer_is_refused_quietly(expression):
    """What a policy could write to get past the warning check or crash the tool: unterminated
    strings, null bytes, bad indentation, deep nesting, stray continuations. Each is refused
    as a CalculatorError (never another exception), without a warning."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(CalculatorError, match="valid expression|deeper"):
            evaluate(expression)
    assert not caught, [str(w.message) for w in caught]
