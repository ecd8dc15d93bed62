"""Exact sums: amounts as whole numbers of 10^-8 units. No I/O, no floats.

A summing counter adds an item attribute (a DynamoDB number) into its buckets.
DynamoDB adds numbers exactly up to 38 significant digits and fails the write
beyond that, and a failing commit would block the shard. So an amount is
accepted only with at most 18 digits before the point and 8 after (26
digits): a bucket then holds the sum of up to 10^12 amounts within 38 digits.
In between, amounts travel as Python integers of units, which add exactly and
fast; the bucket stores them as decimals again.
"""

from __future__ import annotations

from decimal import Context, Decimal, InvalidOperation

FRACTION_DIGITS = 8
INTEGER_DIGITS = 18
UNIT = Decimal(1).scaleb(-FRACTION_DIGITS)
# DynamoDB's own precision: averages are rounded to it, everything else is exact.
DYNAMODB_DIGITS = 38
# Wide enough that no conversion here ever rounds.
_EXACT = Context(prec=100)
_AVERAGE = Context(prec=DYNAMODB_DIGITS)
_LIMIT = Decimal(10) ** INTEGER_DIGITS


class InvalidAmount(ValueError):
    """A value that cannot be added up exactly."""


def units_of(value: object) -> int:
    """The amount ``value`` (a DynamoDB number as boto3 decodes it) in units of 10^-8."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise InvalidAmount(f"not a number: {type(value).__name__}")
    number = Decimal(value)
    if not number.is_finite():
        raise InvalidAmount("not a finite number")
    if abs(number) >= _LIMIT:
        raise InvalidAmount(f"more than {INTEGER_DIGITS} digits before the point")
    units = _EXACT.scaleb(number, FRACTION_DIGITS)
    if units != units.to_integral_value():
        raise InvalidAmount(f"more than {FRACTION_DIGITS} digits after the point")
    return int(units)


def stored_units(text: str) -> int:
    """Units of a sum as DynamoDB returns it (the N string of a bucket's ``sum``)."""
    try:
        units = _EXACT.scaleb(Decimal(text), FRACTION_DIGITS)
    except InvalidOperation:
        raise InvalidAmount(f"not a stored sum: {text[:64]!r}") from None
    if not units.is_finite() or units != units.to_integral_value():
        raise InvalidAmount(f"not a stored sum: {text[:64]!r}")
    return int(units)


def decimal_of(units: int) -> Decimal:
    """The exact decimal of ``units``, without trailing zeros after the point."""
    number = _EXACT.scaleb(Decimal(units), -FRACTION_DIGITS)
    if number == number.to_integral_value():
        return number.quantize(Decimal(1), context=_EXACT)
    return number.normalize(_EXACT)


def average_of(total: Decimal, count: int) -> Decimal | None:
    """Sum / count, rounded half-even to DynamoDB's 38 significant digits; None for no events."""
    if count == 0:
        return None
    quotient = _AVERAGE.divide(total, Decimal(count))
    if quotient == quotient.to_integral_value():
        return quotient.quantize(Decimal(1), context=_EXACT)
    return quotient.normalize(_AVERAGE)


def text_of(number: Decimal | None) -> str | None:
    """Plain decimal text (no exponent): what JSON output carries, so no parser turns it into a float."""
    return None if number is None else format(number, "f")
