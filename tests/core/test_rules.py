import dataclasses
import json
from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factories import image, stream_record
from tally.core.amounts import InvalidAmount, average_of, decimal_of, units_of
from tally.core.histograms import bin_of
from tally.core.sketches import hash_of
from tally.core.records import CounterEvent, Reason, Rejection, parse_image, parse_item, parse_record
from tally.core.rules import MAX_COUNTER_LENGTH, RulesError, parse_rules
from tally.core.settings import Settings, SettingsError

ARRIVAL_MS = 1_795_000_000_000


def rules(*entries):
    return parse_rules(json.dumps(list(entries)))


def applied(parsed, values):
    """What every matching rule makes of an item, in rule order."""
    return [outcome for outcome in (rule.apply(values) for rule in parsed.rules) if outcome is not None]


def settings_with(*entries, **kwargs):
    return Settings(rules=rules(*entries), **kwargs)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("not json", "not valid JSON"),
        ("{}", "non-empty JSON list"),
        ("[]", "non-empty JSON list"),
        ('["jobs"]', "rule 1: must be a JSON object"),
        ('[{"name": "a"}]', "rule 1 ('a'): field 'counter': must be a non-empty template"),
        ('[{"counter": "x", "count": 1}]', "rule 1: field 'count': unknown"),
        ('[{"counter": "jobs/{providerId"}]', "rule 1: field 'counter': unclosed or empty placeholder"),
        ('[{"counter": "jobs/{}"}]', "rule 1: field 'counter': unclosed or empty placeholder"),
        ('[{"counter": "a}b"}]', "rule 1: field 'counter': unmatched '}'"),
        ('[{"counter": "{a}{b}"}]', "need a separator"),
        ('[{"counter": "#mine/{a}"}]', "field 'counter': starts with reserved '#'"),
        ('[{"counter": "#all"}]', "field 'counter': counter starts with reserved '#'"),
        (json.dumps([{"counter": "x" * 256}]), "field 'counter': counter longer than 255"),
        (json.dumps([{"counter": "x" * 253 + "/{a}/{b}"}]), "renders longer than 255"),
        ('[{"counter": "a", "name": "bad name!"}]', "rule 1 ('bad name!'): field 'name'"),
        ('[{"counter": "a", "name": "x"}, {"counter": "b", "name": "x"}]', "rule 2 ('x'): field 'name': same name"),
        ('[{"counter": "a", "sum": 5}]', "field 'sum': must be an attribute name"),
        ('[{"counter": "a", "when": []}]', "field 'when': must map attribute names"),
        ('[{"counter": "a", "when": {"s": "paid"}}]', "field 'when.s': must be one of"),
        ('[{"counter": "a", "when": {"s": {"equals": "x", "exists": true}}}]', "field 'when.s'"),
        ('[{"counter": "a", "when": {"s": {"exists": "yes"}}}]', "'exists' must be true or false"),
        ('[{"counter": "a", "when": {"s": {"oneOf": []}}}]', "'oneOf' must be a list of 1-100"),
        ('[{"counter": "a", "when": {"s": {"equals": {"x": 1}}}}]', "compares with strings, numbers or booleans"),
        ('[{"counter": "a", "when": {"s": {"equals": NaN}}}]', "not valid JSON"),
        (
            '[{"name": "r", "counter": "v/{u}", "sum": "ms"}, {"name": "c", "counter": "v/{u}"}]',
            "rule 2 ('c'): field 'sum': counter 'v/{u}' is also written by rule 'r'",
        ),
        (json.dumps([{"counter": f"c{i}"} for i in range(26)]), "holds 26 rules, at most 25"),
        ('[{"counter": "a", "histogram": ""}]', "field 'histogram': must be an attribute name"),
        ('[{"counter": "a", "histogram": ["ms"]}]', "field 'histogram': must be an attribute name"),
        (
            '[{"name": "r", "counter": "v/{u}", "histogram": "ms"}, {"name": "c", "counter": "v/{u}"}]',
            "rule 2 ('c'): field 'histogram': counter 'v/{u}' is also written by rule 'r'",
        ),
        ('[{"counter": "a", "distinct": 3}]', "field 'distinct': must be an attribute name"),
        (
            '[{"name": "r", "counter": "v/{u}"}, {"name": "c", "counter": "v/{u}", "distinct": "client"}]',
            "rule 2 ('c'): field 'distinct': counter 'v/{u}' is also written by rule 'r'; both must count distinct",
        ),
        ('[{"counter": "a", "becomes": {}}]', "field 'becomes': needs at least one condition"),
        ('[{"counter": "a", "becomes": "done"}]', "field 'becomes': must map attribute names"),
        ('[{"counter": "a", "becomes": {"s": {"is": 1}}}]', "field 'becomes.s': must be one of"),
        ('[{"counter": "a", "on": "UPDATE"}]', "field 'on': must be one of INSERT, MODIFY, REMOVE or a list"),
        ('[{"counter": "a", "on": []}]', "field 'on': must be one of"),
        ('[{"counter": "a", "on": ["INSERT", "INSERT"]}]', "field 'on': names a record kind twice"),
        ('[{"counter": "a", "on": "REMOVE", "becomes": {"s": {"equals": 1}}}]', "a deletion has no new image"),
        ('[{"counter": "a", "deletedBy": "ttl"}]', "field 'deletedBy': only for a rule with \"on\": \"REMOVE\""),
        ('[{"counter": "a", "on": "REMOVE", "deletedBy": "robot"}]', "field 'deletedBy': must be one of any, ttl, user"),
        ('[{"counter": "a", "time": ""}]', "field 'time': must be an attribute name or \"@arrival\""),
        ('[{"counter": "a", "time": "@now"}]', "field 'time': must be an attribute name or \"@arrival\", got \"@now\""),
        ('[{"counter": "a", "time": 5}]', "field 'time'"),
    ],
)
def test_bad_rules_fail_with_one_message_naming_the_rule_and_field(text, message):
    with pytest.raises(RulesError, match=None) as caught:
        parse_rules(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ('[{"counter": "a", "when": {"s": {"equal": 1}}}]', 'got {"equal": 1}'),
        ('[{"counter": "a", "when": {"s": {"equals": {"x": 1.50, "y": [true, null]}}}}]', 'got {"x": 1.50, "y": [true, null]}'),
        ('[{"counter": "a", "when": {"s": "paid"}}]', 'got "paid"'),
        ('[{"counter": "a", "when": [1, 2]}]', "got [1, 2]"),
        ('[{"counter": "a", "sum": true}]', "got true"),
        ('[{"counter": null}]', "got null"),
        ('[{"counter": "a", "name": "bad name!"}]', 'got "bad name!"'),
    ],
)
def test_a_bad_value_is_shown_as_the_json_the_user_wrote(text, shown):
    with pytest.raises(RulesError) as caught:
        parse_rules(text)
    assert str(caught.value).endswith(shown)
    assert "Decimal" not in str(caught.value) and "True" not in str(caught.value)


def test_bad_rules_in_the_environment_name_the_variable():
    with pytest.raises(SettingsError, match=r"^TALLY_RULES: rule 1: field 'counter'"):
        Settings.from_env({"TALLY_RULES": '[{"counter": ""}]'})


def test_rules_from_the_environment_reach_the_settings():
    settings = Settings.from_env({"TALLY_RULES": '[{"name": "jobs", "counter": "jobs/{providerId}"}]'})
    assert [rule.name for rule in settings.counter_rules.rules] == ["jobs"]
    assert Settings.from_env({"TALLY_RULES": " "}).counter_rules.classic


def test_a_constant_counter_names_its_rule_and_a_template_gets_a_numbered_name():
    parsed = rules({"counter": "views/all"}, {"counter": "views/{url}"})
    assert [rule.name for rule in parsed.rules] == ["views/all", "rule-2"]


def render(template, **values):
    [outcome] = applied(rules({"name": "r", "counter": template}), values)
    return outcome


@pytest.mark.parametrize(
    ("template", "values", "counter"),
    [
        ("jobs/{providerId}", {"providerId": "acme"}, "jobs/acme"),
        ("jobs/{providerId}", {"providerId": "ünïcødé 😀"}, "jobs/ünïcødé 😀"),
        ("jobs/{providerId}", {"providerId": 42}, "jobs/42"),
        ("jobs/{providerId}", {"providerId": Decimal("42.0")}, "jobs/42"),
        ("jobs/{providerId}", {"providerId": Decimal("4.50")}, "jobs/4.5"),
        ("jobs/{providerId}", {"providerId": Decimal("-1E+3")}, "jobs/-1000"),
        ("{a}-{b}", {"a": "x", "b": 7}, "x-7"),
        ("{{literal}}/{a}", {"a": "x"}, "{literal}/x"),
        ("views/all", {}, "views/all"),
        ("{u}", {"u": "x#y"}, "x#y"),
        ("{u}", {"u": "x" * MAX_COUNTER_LENGTH}, "x" * MAX_COUNTER_LENGTH),
    ],
)
def test_templates_render_strings_and_numbers(template, values, counter):
    assert render(template, **values).counter == counter


@pytest.mark.parametrize(
    ("template", "values", "reason", "detail"),
    [
        ("jobs/{providerId}", {}, "missing_counter", "no attribute 'providerId'"),
        ("jobs/{providerId}", {"providerId": ""}, "invalid_counter", "empty string"),
        ("jobs/{providerId}", {"providerId": True}, "invalid_counter", "bool, not a string or a number"),
        ("jobs/{providerId}", {"providerId": None}, "invalid_counter", "null"),
        ("jobs/{providerId}", {"providerId": {"a": 1}}, "invalid_counter", "dict"),
        ("{u}", {"u": "#segment#1"}, "invalid_counter", "reserved '#'"),
        ("{u}", {"u": "#rejected#late_event"}, "invalid_counter", "reserved '#'"),
        ("v/{u}", {"u": "x" * (MAX_COUNTER_LENGTH - 1)}, "invalid_counter", "longer than 255"),
        ("v/{u}", {"u": "lone \ud800"}, "invalid_counter", "not valid UTF-8"),
    ],
)
def test_templates_that_cannot_render_are_refused_with_the_rule_name(template, values, reason, detail):
    outcome = render(template, **values)
    assert (outcome.rule, outcome.reason) == ("r", reason)
    assert detail in outcome.detail and "rule 'r'" in outcome.detail


@pytest.mark.parametrize(
    ("when", "values", "matches"),
    [
        ({"status": {"equals": "done"}}, {"status": "done"}, True),
        ({"status": {"equals": "done"}}, {"status": "failed"}, False),
        ({"status": {"equals": "done"}}, {}, False),
        ({"code": {"equals": 200}}, {"code": Decimal("200.0")}, True),
        ({"code": {"equals": 200}}, {"code": "200"}, False),
        ({"flag": {"equals": True}}, {"flag": True}, True),
        ({"flag": {"equals": True}}, {"flag": 1}, False),
        ({"code": {"equals": 1}}, {"code": True}, False),
        ({"status": {"oneOf": ["paid", "refunded"]}}, {"status": "refunded"}, True),
        ({"status": {"oneOf": ["paid", "refunded"]}}, {"status": "open"}, False),
        ({"coupon": {"exists": True}}, {"coupon": None}, True),
        ({"coupon": {"exists": False}}, {}, True),
        ({"coupon": {"exists": False}}, {"coupon": "X"}, False),
        ({"a": {"equals": "x"}, "b": {"exists": True}}, {"a": "x"}, False),
        ({"a": {"equals": "x"}, "b": {"exists": True}}, {"a": "x", "b": 1}, True),
    ],
)
def test_conditions_must_all_hold(when, values, matches):
    outcomes = applied(rules({"name": "r", "counter": "c", "when": when}), values)
    assert bool(outcomes) is matches


@pytest.mark.parametrize(
    ("value", "units"),
    [
        (Decimal("12.34"), 1_234_000_000),
        (7, 700_000_000),
        (Decimal("-0.00000001"), -1),
        (Decimal("999999999999999999.99999999"), 99_999_999_999_999_999_999_999_999),
        (Decimal("1.5E+3"), 150_000_000_000),
    ],
)
def test_amounts_become_exact_units(value, units):
    assert units_of(value) == units
    assert decimal_of(units) == value


@pytest.mark.parametrize(
    "value",
    [Decimal("NaN"), Decimal("Infinity"), Decimal("1E+18"), Decimal("0.000000001"), "12", True, 1.5, None],
)
def test_amounts_that_cannot_be_summed_exactly_are_refused(value):
    with pytest.raises(InvalidAmount):
        units_of(value)


def test_averages_round_to_38_digits_and_need_events():
    assert average_of(Decimal(10), 4) == Decimal("2.5")
    assert average_of(Decimal(1), 3) == Decimal("0." + "3" * 38)
    assert average_of(Decimal(6), 3) == Decimal(2) and str(average_of(Decimal(6), 3)) == "2"
    assert average_of(Decimal(0), 0) is None


FAN_OUT = (
    {"name": "jobs", "counter": "jobs/{providerId}"},
    {"name": "all", "counter": "jobs/all"},
    {"name": "revenue", "counter": "revenue/{providerId}", "when": {"status": {"equals": "done"}}, "sum": "amount"},
)


def test_one_record_fans_out_to_every_matching_rule():
    settings = settings_with(*FAN_OUT, time_attribute="insertUtcTime")
    item = image(id="1", insertUtcTime=ARRIVAL_MS, providerId="p1", status="done", amount=Decimal("19.99"))
    outcomes = parse_record(stream_record(item, arrival_s=ARRIVAL_MS / 1000, sequence="77"), settings)
    assert outcomes == [
        CounterEvent("jobs/p1", ARRIVAL_MS, "77", ARRIVAL_MS),
        CounterEvent("jobs/all", ARRIVAL_MS, "77", ARRIVAL_MS),
        CounterEvent("revenue/p1", ARRIVAL_MS, "77", ARRIVAL_MS, 1_999_000_000),
    ]


def test_one_record_can_be_counted_by_one_rule_and_rejected_by_another():
    settings = settings_with(*FAN_OUT)
    item = {"ts": ARRIVAL_MS, "status": "done", "amount": "lots"}
    outcomes = parse_item(item, ARRIVAL_MS, "5", settings)
    assert [type(o).__name__ for o in outcomes] == ["CounterEvent", "Rejection", "Rejection"]
    assert outcomes[0].counter == "jobs/all"
    assert {(o.rule, o.reason) for o in outcomes[1:]} == {
        ("jobs", Reason.MISSING_COUNTER),
        ("revenue", Reason.MISSING_COUNTER),
    }
    outcomes = parse_item({**item, "providerId": "p"}, ARRIVAL_MS, "5", settings)
    assert (outcomes[-1].rule, outcomes[-1].reason) == ("revenue", Reason.INVALID_SUM)
    outcomes = parse_item({"ts": ARRIVAL_MS, "providerId": "p", "status": "done"}, ARRIVAL_MS, "5", settings)
    assert (outcomes[-1].rule, outcomes[-1].reason) == ("revenue", Reason.MISSING_SUM)


def test_a_bad_time_rejects_the_record_once_however_many_rules_count_it():
    settings = settings_with(*FAN_OUT)
    outcomes = parse_item({"providerId": "p", "ts": "noon"}, ARRIVAL_MS, "5", settings)
    assert outcomes == [Rejection(Reason.INVALID_TIME, outcomes[0].detail, "5", ARRIVAL_MS)]
    late = parse_item({"providerId": "p", "ts": 0}, ARRIVAL_MS, "5", settings)
    assert [o.reason for o in late] == [Reason.LATE_EVENT]


def test_an_item_no_rule_matches_is_skipped_not_rejected():
    settings = settings_with({"name": "paid", "counter": "paid", "when": {"status": {"equals": "paid"}}})
    [outcome] = parse_item({"ts": ARRIVAL_MS, "status": "open"}, ARRIVAL_MS, "5", settings)
    assert outcome.reason is Reason.NO_RULE_MATCHED and not outcome.reason.is_rejection


def test_dynamodb_json_and_decoded_items_give_the_same_outcomes():
    settings = settings_with(*FAN_OUT)
    plain = {"id": "1", "ts": ARRIVAL_MS - 1, "providerId": "p", "status": "done", "amount": Decimal("2.5")}
    assert parse_image(image(**plain), ARRIVAL_MS, "9", settings) == parse_item(plain, ARRIVAL_MS, "9", settings)


def test_the_classic_rule_still_refuses_numeric_counters():
    [outcome] = parse_item({"counter": 7, "ts": ARRIVAL_MS}, ARRIVAL_MS, "5", Settings())
    assert outcome.reason is Reason.INVALID_COUNTER and outcome.rule is None


def test_summing_counters_are_known_from_the_rules():
    parsed = rules(*FAN_OUT)
    assert parsed.sums("revenue/p1") and not parsed.sums("jobs/p1") and not parsed.sums("revenue/")


LOAD = {"name": "load", "counter": "load/{page}", "sum": "ms", "histogram": "ms"}


def test_a_histogram_rule_adds_its_value_to_a_bin_beside_the_count_and_sum():
    settings = settings_with(LOAD, {"name": "spread", "counter": "spread", "histogram": "size"})
    item = {"ts": ARRIVAL_MS, "page": "home", "ms": Decimal("312.5"), "size": -4}
    assert parse_item(item, ARRIVAL_MS, "5", settings) == [
        CounterEvent("load/home", ARRIVAL_MS, "5", ARRIVAL_MS, 31_250_000_000, bin=bin_of(Decimal("312.5"))),
        CounterEvent("spread", ARRIVAL_MS, "5", ARRIVAL_MS, bin=bin_of(-4)),
    ]
    assert {"ms", "size"} <= set(settings.image_attributes)
    assert rules(LOAD).keeps_histogram("load/x") and not rules(LOAD).keeps_histogram("jobs/x")


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (None, Reason.MISSING_HISTOGRAM),
        ("fast", Reason.INVALID_HISTOGRAM),
        (Decimal("1E18"), Reason.INVALID_HISTOGRAM),
        (Decimal("1E-12"), Reason.INVALID_HISTOGRAM),
    ],
)
def test_a_value_a_histogram_cannot_take_refuses_the_event_for_that_rule(value, reason):
    settings = settings_with({"name": "spread", "counter": "spread", "histogram": "size"}, {"name": "all", "counter": "all"})
    item = {"ts": ARRIVAL_MS} if value is None else {"ts": ARRIVAL_MS, "size": value}
    counted, refused = parse_item(item, ARRIVAL_MS, "5", settings)
    assert counted == CounterEvent("all", ARRIVAL_MS, "5", ARRIVAL_MS)
    assert (refused.rule, refused.reason) == ("spread", reason) and reason.is_rejection
    assert "'size'" in refused.detail


def test_a_distinct_rule_hashes_its_value_beside_the_count_and_other_aggregates():
    settings = settings_with({**LOAD, "distinct": "client"})
    item = {"ts": ARRIVAL_MS, "page": "home", "ms": Decimal(80), "client": "c-17"}
    [event] = parse_item(item, ARRIVAL_MS, "5", settings)
    assert (event.counter, event.hashed, event.bin) == ("load/home", hash_of("c-17"), bin_of(Decimal(80)))
    assert "client" in settings.image_attributes
    parsed = rules({**LOAD, "distinct": "client"})
    assert parsed.counts_distinct("load/x") and not parsed.counts_distinct("views/x")


@pytest.mark.parametrize(
    ("value", "reason"), [(None, Reason.MISSING_DISTINCT), ("", Reason.INVALID_DISTINCT), (True, Reason.INVALID_DISTINCT)]
)
def test_a_value_a_distinct_count_cannot_take_refuses_the_event_for_that_rule(value, reason):
    settings = settings_with({"name": "visitors", "counter": "visitors", "distinct": "client"}, {"name": "all", "counter": "all"})
    item = {"ts": ARRIVAL_MS} if value is None else {"ts": ARRIVAL_MS, "client": value}
    counted, refused = parse_item(item, ARRIVAL_MS, "5", settings)
    assert counted == CounterEvent("all", ARRIVAL_MS, "5", ARRIVAL_MS)
    assert (refused.rule, refused.reason) == ("visitors", reason) and "'client'" in refused.detail
# --- record kinds, transitions and per-rule time: how rules read ---------------------------------

DONE = {"name": "done", "counter": "done/{providerId}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"}


def test_a_becomes_rule_sees_inserts_and_changes_a_plain_rule_inserts_and_a_deletion_rule_removals():
    parsed = rules(
        {"name": "placed", "counter": "placed"},
        DONE,
        {"name": "gone", "counter": "gone", "on": "REMOVE", "deletedBy": "ttl", "time": "@arrival"},
        {"name": "edits", "counter": "edits", "on": ["MODIFY"]},
    )
    placed, done, gone, edits = parsed.rules
    assert (placed.on, done.on, gone.on, edits.on) == (
        {"INSERT"},
        {"INSERT", "MODIFY"},
        {"REMOVE"},
        {"MODIFY"},
    )
    assert (done.time, gone.time, placed.time, gone.deleted_by, placed.deleted_by) == ("doneAt", "@arrival", None, "ttl", "any")
    assert "doneAt" in parsed.attributes and "@arrival" not in parsed.attributes
    assert parsed.kinds == {"INSERT", "MODIFY", "REMOVE"}
    assert [rule.name for rule in parsed.seeing["MODIFY"]] == ["done", "edits"]


@pytest.mark.parametrize(
    ("entries", "view"),
    [
        ([{"counter": "a"}], "NEW_IMAGE"),
        ([{"counter": "a", "on": "MODIFY"}], "NEW_IMAGE"),  # a change judged on its new image alone
        ([{"counter": "a", "becomes": {"s": {"equals": 1}}, "on": "INSERT"}], "NEW_IMAGE"),
        ([{"counter": "a"}, DONE], "NEW_AND_OLD_IMAGES"),
        ([{"counter": "a", "on": "REMOVE"}], "OLD_IMAGE"),
        ([{"counter": "a", "on": "REMOVE"}, {"counter": "b"}], "NEW_AND_OLD_IMAGES"),
    ],
)
def test_the_rules_name_the_stream_view_they_need(entries, view):
    parsed = rules(*entries)
    assert parsed.stream_view == view
    assert parsed.view_shortfall(view) is None
    assert parsed.view_shortfall("KEYS_ONLY") is not None


def test_a_view_shortfall_names_the_first_rule_that_lacks_an_image():
    parsed = rules({"name": "placed", "counter": "placed"}, DONE)
    assert parsed.view_shortfall("NEW_IMAGE") == (
        "rule 'done' judges changes against the old image, so the view must be NEW_AND_OLD_IMAGES"
    )
    assert Settings().counter_rules.view_shortfall("OLD_IMAGE") == (
        "the classic rule reads each new item, so the view must be NEW_IMAGE or NEW_AND_OLD_IMAGES"
    )


# --- a rule's own countFrom and retirement --------------------------------------------------------

LIFETIME_RULES = (
    {"name": "orders", "counter": "orders/{shop}", "retiredAt": "2026-11-18T20:00:00Z"},
    {"name": "orders-v2", "counter": "orders2/{shop}", "countFrom": "2026-11-18T20:00:00Z"},
    {"name": "shops", "counter": "shops/all"},
)
RETIRED_MS = 1_795_032_000_000  # 2026-11-18T20:00:00Z


def test_a_rule_counts_from_its_own_instant_and_stops_at_its_retirement():
    parsed = rules(*LIFETIME_RULES)
    old, new, always = parsed.rules
    assert (old.count_from_ms, old.retired_ms) == (None, RETIRED_MS)
    assert (new.count_from_ms, new.retired_ms) == (RETIRED_MS, None)
    assert parsed.timed and not rules({"counter": "a"}).timed
    assert old.counts_arrival(RETIRED_MS - 1000) and not old.counts_arrival(RETIRED_MS)
    assert not new.counts_arrival(RETIRED_MS - 1000) and new.counts_arrival(RETIRED_MS)
    assert always.counts_arrival(0)


@pytest.mark.parametrize(
    ("arrival_ms", "counters"),
    [
        (RETIRED_MS - 1000, ["orders/s1", "shops/all"]),  # the last second of the old rule
        (RETIRED_MS, ["orders2/s1", "shops/all"]),  # the cut-over second counts in the new rule alone
    ],
)
def test_each_record_counts_once_across_a_cut_over_from_a_retired_rule_to_its_successor(arrival_ms, counters):
    settings = Settings(rules=rules(*LIFETIME_RULES), time_attribute="at")
    outcomes = parse_item({"shop": "s1", "at": arrival_ms - 5000}, arrival_ms, "100", settings)
    assert sorted(o.counter for o in outcomes) == counters


def test_a_record_only_rules_outside_their_lifetime_would_count_is_a_routine_skip_naming_why():
    settings = Settings(rules=rules(*LIFETIME_RULES[:2]), time_attribute="at")
    (before,) = parse_item({"shop": "s1", "at": RETIRED_MS}, RETIRED_MS + 1000, "1", only(settings, "orders-v2"))
    assert isinstance(before, CounterEvent)
    (skipped,) = parse_item({"shop": "s1", "at": RETIRED_MS - 9000}, RETIRED_MS - 1000, "1", only(settings, "orders-v2"))
    assert skipped.reason is Reason.BEFORE_COUNT_FROM and "rule 'orders-v2'" in skipped.detail
    (retired,) = parse_item({"shop": "s1", "at": RETIRED_MS}, RETIRED_MS, "1", only(settings, "orders"))
    assert retired.reason is Reason.RULE_RETIRED and not retired.reason.is_rejection
    assert "rule 'orders'" in retired.detail


def test_a_rule_outside_its_lifetime_refuses_nothing_for_want_of_an_image():
    settings = Settings(rules=rules({"name": "gone", "counter": "gone", "on": "REMOVE", "retiredAt": RETIRED_MS // 1000}))
    record = stream_record(event_name="REMOVE", arrival_s=RETIRED_MS / 1000, keys={"id": {"S": "1"}})
    (outcome,) = parse_record(record, settings)
    assert outcome.reason is Reason.RULE_RETIRED  # not missing_old_image: the rule no longer counts it


def only(settings, *names):
    return dataclasses.replace(settings, rules=settings.counter_rules.named(names))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"counter": "a", "countFrom": "yesterday"}, "field 'countFrom': must be epoch seconds or ISO-8601"),
        ({"counter": "a", "countFrom": True}, "field 'countFrom': must be an instant"),
        ({"counter": "a", "retiredAt": "2026-11-18T20:00:00.500Z"}, "field 'retiredAt': must be a whole second"),
        ({"counter": "a", "countFrom": 1795032000, "retiredAt": 1795032000}, "field 'retiredAt': must be after its countFrom"),
    ],
)
def test_bad_lifetimes_are_refused_naming_the_rule_and_field(entry, message):
    with pytest.raises(RulesError) as caught:
        rules(entry)
    assert message in str(caught.value) and str(caught.value).startswith("rule 1")


def test_a_rule_may_not_count_from_before_the_deployment_so_no_history_is_counted_twice():
    with pytest.raises(SettingsError, match=r"^TALLY_COUNT_FROM='1795032001': rule 'orders-v2' counts from before"):
        Settings.from_env({"TALLY_RULES": json.dumps(list(LIFETIME_RULES)), "TALLY_COUNT_FROM": "1795032001"})
    later = Settings.from_env({"TALLY_RULES": json.dumps(list(LIFETIME_RULES)), "TALLY_COUNT_FROM": "1795032000"})
    assert later.counter_rules.rules[1].count_from_ms == later.count_from_ms


def test_rules_are_picked_by_name_and_an_unknown_name_lists_the_rules():
    parsed = rules(*LIFETIME_RULES)
    assert [rule.name for rule in parsed.named(["shops", "orders"]).rules] == ["orders", "shops"]
    with pytest.raises(RulesError, match=r"^no rule named 'refunds'; the rules are 'orders', 'orders-v2', 'shops'$"):
        parsed.named(["refunds"])


def test_a_counter_is_retired_once_every_rule_that_writes_it_is():
    parsed = rules(
        {"name": "old", "counter": "orders/{shop}", "retiredAt": RETIRED_MS // 1000},
        {"name": "all", "counter": "all", "retiredAt": RETIRED_MS // 1000},
        {"name": "all-too", "counter": "all"},
    )
    assert parsed.retired_at("orders/s1", RETIRED_MS) == RETIRED_MS
    assert parsed.retired_at("orders/s1", RETIRED_MS - 1) is None  # retiring later: still counting
    assert parsed.retired_at("all", RETIRED_MS + 1) is None  # another rule still writes it
    assert parsed.retired_at("refunds/s1", RETIRED_MS) is None  # no rule writes it
    assert [rule.name for rule in parsed.writers("all")] == ["all", "all-too"]  # what a read's note names
    assert parsed.writers("refunds/s1") == ()


@given(
    kinds=st.lists(st.sampled_from(["order", "refund", "reorder", None]), min_size=1, max_size=30),
    offsets=st.lists(st.integers(1, 3 * 3600), min_size=30, max_size=30),
    arrival_before=st.integers(1, 3600),
    event_name=st.sampled_from(["INSERT", "MODIFY", "REMOVE"]),
)
def test_records_arriving_before_a_change_parse_alike_under_the_rules_before_and_after_it(kinds, offsets, arrival_before, event_name):
    """A retried batch, a carried window state or a range read again may be parsed by the function deployed before
    the change or by the one after: for records arriving before its instants they must give the same outcomes."""
    before = [{"name": "orders", "counter": "orders/{shop}", "when": {"kind": {"equals": "order"}}, "on": ["INSERT", "MODIFY", "REMOVE"]}]
    after = [
        {**before[0], "retiredAt": RETIRED_MS // 1000},
        {"name": "orders-v2", "counter": "orders2/{shop}", "when": {"kind": {"oneOf": ["order", "reorder"]}},
         "on": ["INSERT", "MODIFY", "REMOVE"], "countFrom": RETIRED_MS // 1000},
        {"name": "refunds", "counter": "refunds/{shop}", "countFrom": RETIRED_MS // 1000 + 60},
    ]
    old, new = (Settings(rules=rules(*entries), time_attribute="at") for entries in (before, after))
    arrival_s = RETIRED_MS / 1000 - arrival_before
    for n, kind in enumerate(kinds):
        attributes = {"id": str(n), "shop": f"s{n % 2}", "at": RETIRED_MS - offsets[n] * 1000}
        if kind is not None:
            attributes["kind"] = kind
        item = image(**attributes)
        record = stream_record(
            None if event_name == "REMOVE" else item, old_image=item if event_name != "INSERT" else None,
            event_name=event_name, arrival_s=arrival_s, sequence=str(100 + n),
        )
        counted_old = [o for o in parse_record(record, old) if isinstance(o, CounterEvent)]
        counted_new = [o for o in parse_record(record, new) if isinstance(o, CounterEvent)]
        assert counted_new == counted_old
        rejected_old = [o for o in parse_record(record, old) if not isinstance(o, CounterEvent) and o.reason.is_rejection]
        rejected_new = [o for o in parse_record(record, new) if not isinstance(o, CounterEvent) and o.reason.is_rejection]
        assert rejected_new == rejected_old
