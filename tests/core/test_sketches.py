import base64
import random
import zlib
import statistics
from decimal import Decimal

import pytest
from hypothesis import given, settings as hypothesis_settings
from hypothesis import strategies as st

from tally.core.sketches import (
    REGISTERS,
    SPARSE_LIMIT,
    STANDARD_ERROR,
    InvalidValue,
    Sketch,
    UnreadableSketch,
    hash_of,
    union,
)


def sketch_of(values):
    return Sketch(hash_of(value) for value in values)


def test_a_sketch_of_few_values_counts_them_exactly_and_keeps_their_hashes():
    values = [f"client-{n}" for n in range(SPARSE_LIMIT)]
    sketch = sketch_of(values + values[:10])
    assert sketch.exact and sketch.count() == SPARSE_LIMIT
    one_more = sketch_of(values + ["client-x"])
    assert not one_more.exact  # past the sparse limit: registers


def test_values_are_compared_as_counter_templates_render_them():
    assert hash_of("5") == hash_of(5) == hash_of(Decimal("5.0")) == hash_of(Decimal("5E0"))
    assert hash_of(Decimal("2.50")) == hash_of("2.5") != hash_of("2.50")
    assert hash_of("ü") != hash_of("u")


@pytest.mark.parametrize("value", ["", True, None, [1], {"a": 1}, Decimal("NaN"), Decimal("Infinity"), b"x"])
def test_values_a_distinct_count_cannot_take_are_refused(value):
    with pytest.raises(InvalidValue):
        hash_of(value)


@pytest.mark.parametrize("n", [150, 1_000, 20_000, 200_000])
def test_large_sets_are_estimated_within_the_standard_error_on_average(n):
    rng = random.Random(n)
    errors = []
    for trial in range(8):
        sketch = sketch_of(f"{trial}-{rng.getrandbits(64)}" for _ in range(n))
        errors.append(sketch.count() / n - 1)
    rms = statistics.fmean(e * e for e in errors) ** 0.5
    assert rms < 1.5 * STANDARD_ERROR, errors
    assert all(abs(e) < 4 * STANDARD_ERROR for e in errors), errors


@hypothesis_settings(max_examples=40, deadline=None)
@given(st.lists(st.sets(st.integers(0, 400), max_size=150), min_size=1, max_size=5))
def test_union_is_the_sketch_of_all_values_and_merging_twice_changes_nothing(parts):
    sketches = [sketch_of(part) for part in parts]
    everything = sketch_of(set().union(*parts))
    merged = union(sketches)
    assert merged == everything
    again = merged.copy()
    for sketch in sketches:
        again.merge(sketch)
    assert again == merged  # idempotent: a redelivered segment changes nothing
    if len(set().union(*parts)) <= SPARSE_LIMIT:
        assert merged.exact and merged.count() == len(set().union(*parts))


def test_merging_a_dense_sketch_into_a_sparse_one_takes_the_register_maximum():
    sparse, dense = sketch_of(range(10)), sketch_of(range(5, 1_000))
    sparse.merge(dense)
    assert sparse == sketch_of(range(1_000))
    assert not sparse.exact


@pytest.mark.parametrize("values", [[], ["a"], list(range(SPARSE_LIMIT)), list(range(5_000))])
def test_the_stored_form_round_trips_and_does_not_depend_on_order(values):
    sketch = sketch_of(values)
    stored = sketch.to_bytes()
    assert Sketch.from_bytes(stored) == sketch
    assert sketch_of(reversed(values)).to_bytes() == stored
    assert len(stored) <= (1 + 8 * SPARSE_LIMIT if sketch.exact else 2_000)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x01" + b"x" * 7,
        b"\x01" + b"x" * 8 * (SPARSE_LIMIT + 1),
        b"\x02not zlib",
        b"\x03",
        b"\x02" + zlib.compress(bytes(REGISTERS - 1)),
        b"\x02" + zlib.compress(bytes([60]) * REGISTERS),
    ],
)
def test_bytes_that_are_no_sketch_are_refused(data):
    with pytest.raises(UnreadableSketch):
        Sketch.from_bytes(data)


def test_a_dense_sketch_stays_within_the_window_state_bytes_segments_charge_it():
    from tally.core.segments import _DENSE_SKETCH_BYTES, _dense_bytes

    sketch = Sketch()
    for n in range(300_000):
        sketch.add(hash_of(n))
        if n in (SPARSE_LIMIT + 1, 150, 300, 1_000, 2_000, 20_000, 299_999):
            stored = len(base64.b64encode(sketch.to_bytes()))
            assert stored < _DENSE_SKETCH_BYTES and stored < _dense_bytes(sketch.registers_used()), n
    assert _dense_bytes(sketch.registers_used()) <= _DENSE_SKETCH_BYTES + 40


@given(st.sets(st.integers(0, 4095), min_size=1, max_size=600), st.randoms(use_true_random=False))
def test_any_registers_in_use_compress_within_what_segments_charge_them(indices, rng):
    from tally.core.segments import _dense_bytes

    registers = bytearray(4096)
    for index in indices:
        registers[index] = rng.randint(1, 53)  # any rank, even ones no real set of values gives
    sketch = Sketch.from_bytes(b"\x02" + zlib.compress(bytes(registers), 9))
    assert len(base64.b64encode(sketch.to_bytes())) <= _dense_bytes(sketch.registers_used())


@hypothesis_settings(max_examples=40, deadline=None)
@given(first=st.lists(st.integers(0, 2**64 - 1), max_size=400), second=st.lists(st.integers(0, 2**64 - 1), max_size=400))
def test_a_dense_sketch_keeps_count_of_its_registers_in_use_through_adds_merges_copies_and_storage(first, second):
    """The count a fold reads at every value stays the registers not 0, however the registers changed."""
    a, b = Sketch(first), Sketch(second)
    for sketch in (a, b, Sketch.from_bytes(a.to_bytes()), a.copy()):
        if not sketch.exact:
            assert sketch.registers_used() == REGISTERS - sketch.registers.count(0)
    a.merge(b)
    if not a.exact:
        assert a.registers_used() == REGISTERS - a.registers.count(0)
