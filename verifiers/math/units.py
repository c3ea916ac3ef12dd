r"""The explicit table of units and magnitude words an answer may carry beside its value.

A unit is read, never guessed: only the words below are units (``cm``, ``inches``, a degree
sign...), each with one canonical name, so ``12 \text{ centimeters}`` and ``12 cm`` carry the same
unit ``cm``. The grader accepts a predicted unit only where the gold answer carries the same
unit (see ``grader.py``); any other word beside a value makes the answer unreadable. Magnitude
words are values, not units: ``2 \text{ million}`` reads as ``2 \times 10^{6}``.
"""

from __future__ import annotations

__all__ = ["MAGNITUDES", "canonical_unit"]

_TABLE = {
    "cm": "cm centimeter centimeters centimetre centimetres",
    "m": "m meter meters metre metres",
    "km": "km kilometer kilometers kilometre kilometres",
    "mm": "mm millimeter millimeters millimetre millimetres",
    "nm": "nm nanometer nanometers",
    "in": "in inch inches",
    "ft": "ft foot feet",
    "yd": "yd yard yards",
    "mi": "mi mile miles",
    "kg": "kg kilogram kilograms",
    "g": "g gram grams",
    "mg": "mg milligram milligrams",
    "lb": "lb lbs pound pounds",
    "oz": "oz ounce ounces",
    "s": "s sec secs second seconds",
    "min": "min mins minute minutes",
    "h": "h hr hrs hour hours",
    "day": "day days",
    "week": "week weeks",
    "month": "month months",
    "year": "year years",
    "dollar": "dollar dollars",
    "cent": "cent cents",
    "deg": "deg degree degrees",
    "rad": "rad radian radians",
    "mph": "mph",
    "kph": "kph",
    "L": "l liter liters litre litres",
    "mL": "ml milliliter milliliters millilitre millilitres",
    "gal": "gallon gallons",
    "cup": "cup cups",
    "unit": "unit units",
}
_ALIASES = {alias: name for name, aliases in _TABLE.items() for alias in aliases.split()}
_POWERS = {"square": 2, "sq": 2, "cubic": 3}

MAGNITUDES = {
    "hundred": "10^{2}",
    "thousand": "10^{3}",
    "million": "10^{6}",
    "billion": "10^{9}",
    "trillion": "10^{12}",
    "dozen": "12",
}
"""Magnitude words and the factor they stand for (read as ``value \times factor``)."""


def canonical_unit(words: str, power: int = 1) -> str | None:
    """The canonical name of a unit written as ``words`` (``square feet``, ``cm``), or None.

    Args:
        words: the unit as written (case-insensitive; one word, or "square"/"cubic" and one).
        power: the power written after it (``cm^2``).
    """
    parts = words.lower().replace(".", " ").split()
    if not parts:
        return None
    while len(parts) > 1 and parts[0] in _POWERS:
        power *= _POWERS[parts.pop(0)]
    if len(parts) != 1 or parts[0] not in _ALIASES:
        return None
    name = _ALIASES[parts[0]]
    return name if power == 1 else f"{name}^{power}"
