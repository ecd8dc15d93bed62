import math
from decimal import Decimal

import pytest
from hypothesis import given, settings as hypothesis_settings
from hypothesis import strategies as st

from tally.core.histograms import (
    MAX_MAGNITUDE,
    MIN_MAGNITUDE,
    RELATIVE_ACCURACY,
    ZERO_BIN,
    Histogram,
    InvalidQuantile,
    InvalidValue,
    bin_of,
    is_bin,
    parse_quantile,
    signed_sum,
)

# Numbers as DynamoDB holds them (up to 38 significant digits), within the accepted magnitudes.
magnitudes = st.decimals(min_value=MIN_MAGNITUDE, max_value=MAX_MAGNITUDE, allow_nan=False, allow_infinity=False).filter(
    lambda d: d < MAX_MAGNITUDE and len(d.normalize().as_tuple().digits) <= 38
)
values = st.one_of(st.just(Decimal(0)), magnitudes, magnitudes.map(Decimal.copy_negate))


def histogram(*numbers):
    bins: dict[str, int] = {}
    for number in numbers:
        name = bin_of(Decimal(number))
        bins[name] = bins.get(name, 0) + 1
    return Histogram(bins)


@hypothesis_settings(max_examples=300, deadline=None)
@given(values)
def test_a_value_is_answered_within_one_percent_and_lies_within_its_bin_bounds(value):
    one = histogram(value)
    estimate = one.quantile("0.5")
    assert abs(estimate - value) <= RELATIVE_ACCURACY * abs(value)
    assert one.low <= value <= one.high
    assert one.low <= estimate <= one.high


def test_zero_has_its_own_bin_and_is_answered_exactly():
    assert bin_of(0) == bin_of(Decimal("0E+5")) == bin_of(Decimal("-0")) == ZERO_BIN
    assert histogram(0).quantile(1) == 0
    assert (histogram(0).low, histogram(0).high) == (0, 0)


def test_negative_values_mirror_the_positive_bins():
    assert bin_of(Decimal("-12.5"))[1:] == bin_of(Decimal("12.5"))[1:]
    assert bin_of(Decimal("-12.5"))[0] == "-" and bin_of(Decimal("12.5"))[0] == "+"
    assert histogram(-12.5).quantile(0) == -histogram(12.5).quantile(0)


def test_bins_are_half_open_at_the_exact_powers_of_gamma():
    # (1.02^1, 1.02^2] is one bin: its upper edge belongs to it, a hair above does not.
    assert bin_of(Decimal("1.0404")) == bin_of(Decimal("1.0203"))
    assert bin_of(Decimal("1.0404")) != bin_of(Decimal("1.04040000000000000000000000000000000001"))
    assert bin_of(Decimal("1.02")) != bin_of(Decimal("1.0201"))
    assert histogram(Decimal("1.0404")).high == Decimal("1.0404")
    assert histogram(Decimal("1.0404")).low == Decimal("1.02")


def test_bin_names_are_three_bytes_at_most_and_read_back_as_bins():
    names = {bin_of(value) for value in (MIN_MAGNITUDE, -MIN_MAGNITUDE, Decimal("9.99E17"), Decimal("-9.99E17"), 1)}
    assert all(len(name.encode()) <= 3 and is_bin(name) for name in names)
    assert len(names) == 5
    for other in ("count", "sum", "ttl", "pk", "sk", "+", "+A", "+AAA", "x12"):
        assert not is_bin(other)


@pytest.mark.parametrize(
    "value, reason",
    [
        (Decimal("1E-10"), "magnitude"),
        (Decimal("1E18"), "magnitude"),
        (Decimal("-1E19"), "magnitude"),
        (Decimal("Infinity"), "finite"),
        ("12", "not a number: str"),
        (True, "not a number: bool"),
        (None, "not a number: NoneType"),
    ],
)
def test_values_a_histogram_cannot_take_are_refused_with_the_reason(value, reason):
    with pytest.raises(InvalidValue, match=reason):
        bin_of(value)


def test_the_q_quantile_is_the_value_of_rank_ceiling_q_n():
    ten = histogram(*range(10, 110, 10))  # 10, 20, ..., 100: one bin each
    assert ten.total == 10
    expected = {"0": 10, "0.1": 10, "0.11": 20, "0.5": 50, "0.51": 60, "0.9": 90, "0.99": 100, "1": 100}
    for q, value in expected.items():
        assert abs(ten.quantile(q) - value) <= RELATIVE_ACCURACY * value, q
        assert histogram(value).quantile(0) == ten.quantile(q), q


def test_quantiles_order_negative_values_zero_and_positive_values():
    mixed = histogram(-500, -2, 0, 0, 3, 7000)
    answers = [mixed.quantile(q) for q in ("0", "0.2", "0.4", "0.6", "0.8", "1")]
    assert answers == sorted(answers)
    assert answers[2] == answers[3] == 0
    assert mixed.low <= -500 and mixed.high >= 7000


def test_an_empty_histogram_answers_none():
    empty = Histogram({})
    assert (empty.total, empty.quantile("0.5"), empty.low, empty.high) == (0, None, None, None)


def test_a_signed_sum_subtracts_bins_exactly_and_empty_bins_hold_nothing():
    hour = histogram(1, 2, 2, 300).bins
    other_minutes = histogram(2, 300).bins
    window = Histogram(signed_sum([(1, hour), (-1, other_minutes)]))
    assert window.bins == histogram(1, 2).bins
    assert window.total == 2


def test_quantiles_rank_exactly_for_large_counts():
    # q·n computed in decimals: 0.99 of 10^17 values is rank 99·10^15 exactly, not a float's neighbour.
    n = 10**17
    low, high = bin_of(Decimal(1)), bin_of(Decimal(1000))
    split = Histogram({low: 99 * 10**15, high: n - 99 * 10**15})
    assert split.quantile("0.99") < 2
    assert split.quantile("0.990000000000000001") > 900


@pytest.mark.parametrize("text", ["-0.1", "1.5", "x", "", "nan", "Infinity"])
def test_a_quantile_outside_0_to_1_is_refused(text):
    with pytest.raises(InvalidQuantile):
        parse_quantile(text)
    with pytest.raises(InvalidQuantile):
        histogram(1).quantile(text)


def test_quantiles_given_as_floats_mean_their_shortest_decimal():
    thousand = Histogram({bin_of(Decimal(1)): 990, bin_of(Decimal(1000)): 10})
    assert thousand.quantile(0.99) == thousand.quantile("0.99") < 2


def test_a_typical_latency_spread_needs_few_bins():
    # 1 ms to 60 s with a value in the middle of every bin: log(60000) / log(1.02) bins, 557.
    spread = histogram(*(Decimal(1.02 ** (k + 0.5)) for k in range(0, 557)))
    assert 1.02**557 > 60_000 and len(spread.bins) == math.ceil(math.log(60_000) / math.log(1.02)) + 1 == 557
