"""What moto still gets wrong that tally's local runs depend on, each patch named by the DynamoDB behaviour it plays.

Each gap is checked against moto as it is by tests/local/test_moto_fixes.py
(``test_moto_still_needs_each_patch``), which fails once a moto release closes
it; the patched behaviour is checked against DynamoDB Local by
tests/local/test_backends.py. Checked with moto 5.2.5:

1. **Writes to an item apply one at a time** (DynamoDB serializes the writes
   to one item, and isolates a transaction from every other write to its
   items). moto's threaded server runs requests concurrently without a lock, so
   two shards adding to the same bucket at once can lose an update, or a
   rollback undo another thread's commit. ``install()`` runs UpdateItem and
   TransactWriteItems one at a time, and answers an UpdateItem with the item
   as that update left it: moto reads the item before and after the write
   outside it, so a racing add showed in another update's ``UPDATED_NEW``, and
   two shards creating one hour item could each find it older than they made it
   (neither putting the counter's directory entry).
2. **Numbers add exactly, to 38 significant digits**, from 1E-130 to
   9.9999999999999999999999999999999999999E+125, and accept the exponent form
   ("1E-8"). moto adds in Python's default 28-digit context, rounding a large sum
   silently, and fails on the exponent form. ``install()`` adds as DynamoDB does
   and refuses a sum that would need more digits or a larger or smaller
   magnitude with a ValidationException ("Number overflow" for an inexact sum,
   as DynamoDB words it).
3. **A transaction costs the items it touches**: moto backs a table up before
   a transaction (to roll back on failure) with a deep copy of the whole table,
   once per item of the transaction, so a 100-item commit against a table of N
   items copies 100 N items. ``install()`` backs up the table's index structure
   and deep-copies only the touched items, once: the rollback restores the same
   state, in time linear in the transaction.
4. **Expired items are deleted by the TTL process**, their REMOVE records signed
   by the service (``userIdentity`` type Service, principal
   dynamodb.amazonaws.com). moto has no TTL process: ``expire_items`` plays it
   for one table of the in-process moto (its threaded server included), so
   rules that tell TTL deletions apart can be checked end to end.

5. **An answer takes time linear in its size.** moto 5.2 serializes every
   answer by walking DynamoDB's model, and for each member of each structure
   (each ``AttributeValue`` of each item) asks six alias providers and
   botocore's ``xform_name`` which key of the Python value holds it: a scan
   of a few thousand items spends most of its time there. Where the value is
   a plain ``dict`` (all that moto's DynamoDB answers hold) the keys tried
   depend only on the model's shape and the member's name, so ``install()``
   remembers them per shape and member, and looks a plain key up in the
   ``dict`` itself: the same keys, tried in the same order, the same answer,
   several times faster. Being about time alone, it
   is checked the other way round: every answer shape tally reads is the same
   with and without it (``test_remembered_member_keys_give_the_answers_moto_gives_without_them``).

6. **An update expression is parsed once.** moto parses each UpdateItem's
   expression twice per request (the handler reads its placeholders, the
   backend validates it), about a seventh of the time of a small update. The
   parsed tree is only ever read, and copied before the validator fills it in,
   so ``install()`` keeps the tree of each expression text it has parsed (a
   commit sends the same few texts all day). Also about time alone, it is
   checked as equal answers with and without it
   (``test_remembered_update_expressions_give_the_answers_moto_gives_without_them``).

7. **A Query reads one partition.** For a Query of a table (not of an
   index) moto sorts every item of the table and then keeps those of the
   asked partition, so each Query costs time in the size of the whole table.
   ``install()`` hands that Query the asked partition's items alone, sorted
   the same way: the same items, in the same order (an item's key hashes as
   it compares). Also about time alone, it is checked as equal answers with
   and without it (``test_partitions_read_alone_give_the_answers_moto_gives_without_them``).

8. **An update is validated in time linear in its expression.** moto
   validates each UpdateItem (twice for a new item) with ten passes over a
   deep copy of its parsed tree: each pass builds its table of node kinds
   again at every node, and two of them (one clause of each kind, no two
   actions on one path) look again at the whole subtree under every action,
   though they read nothing but the text and its names. ``install()`` walks
   each pass over the tree as moto does, node for node, with the pass's table
   built once and its processor chosen once per kind of node; copies a tree
   from a pickled image of it (taken once and kept on the tree, which is
   otherwise never changed); and runs the two checks that read the text alone
   once per text and names with which every pass passed. A quarter of the time
   of tally's commits. Also about time alone, it is checked as equal answers
   and errors with and without it
   (``test_validations_made_once_give_the_answers_moto_gives_without_them``).

9. **What depends on a request's text alone is worked out once.** moto lists
   the handler class's methods (``inspect.getmembers``) on every request to
   find its action, and lexes each condition and filter text with regular
   expressions on every request. ``install()`` lists each handler class once
   and keeps the tokens of each text (fresh nodes are made from them each
   time, as lexing makes them). With fix 8's walk, the fault suite's
   single-fault runs take about 15 % less CPU. Also about time alone, it is
   checked as equal answers with and without it
   (``test_texts_read_once_give_the_answers_moto_gives_without_them``).

10. **A request finds its service without listing moto's package.** moto's
   server, finding which service a request is for, lists moto's package
   directory and looks at each of its 182 entries, on every request and
   under the lock every request takes; the directory does not change while a
   server runs. ``install()`` lists it once. Also about time alone, it is
   checked as the same services, found over a real socket without listing the
   directory again (``test_services_listed_once_are_the_ones_moto_lists``).

Other moto gaps need no patch, as tally never meets them (tests/local/test_backends.py
pins each): a MODIFY for an identical re-put and two INSERTs for an UpdateItem
on a new key, numbers of more than 38 digits stored whole, duplicate keys in one
BatchWriteItem applied, consumed capacity by other rules than DynamoDB's.

The embedded pipeline and the tests use it; the Lambda function never imports it.
"""

from __future__ import annotations

import copy
import inspect
import pickle
import threading
from collections import defaultdict, deque
from decimal import Context, Decimal, Inexact, Overflow, Subnormal
from functools import lru_cache, wraps
from types import SimpleNamespace
from typing import Any

_active = threading.local()
_one_write_at_a_time = threading.RLock()  # a transaction's Updates go through update_item
# DynamoDB's numbers: 38 significant digits, magnitudes from 1E-130 to 9.9999999999999999999999999999999999999E+125.
# A result that only drops trailing zeros (99...9 + 1 = 1E+38) is exact: Rounded alone is no error.
_DYNAMODB_NUMBERS = Context(prec=38, Emax=125, Emin=-130, traps=[Inexact, Overflow, Subnormal])
NUMBER_OVERFLOW = "Number overflow. Attempting to store a number with magnitude larger than supported range"
NUMBER_UNDERFLOW = "Number underflow. Attempting to store a number with magnitude smaller than supported range"
# As the Streams API spells the identity of a TTL deletion (Lambda spells it type / principalId).
TTL_DELETION_IDENTITY = {"PrincipalId": "dynamodb.amazonaws.com", "Type": "Service"}
# DynamoDB's TTL process leaves alone items whose expiry lies more than five years in the past.
TTL_IGNORED_AFTER_SECONDS = 5 * 365 * 86_400


def expire_items(table_name: str, now_s: float, region: str = "us-east-1") -> list[dict[str, Any]]:
    """Delete the expired items of a moto table as DynamoDB's TTL process would; return their keys (DynamoDB JSON).

    An item expires when its TTL attribute (the table's, once TTL is enabled)
    is a number of epoch seconds at or before ``now_s``, and not more than
    five years before it; other values are left alone, as DynamoDB leaves them.
    """
    from moto.core import DEFAULT_ACCOUNT_ID
    from moto.dynamodb.models import dynamodb_backends

    table = dynamodb_backends[DEFAULT_ACCOUNT_ID][region].get_table(table_name)
    if table.ttl.get("TimeToLiveStatus") != "ENABLED":
        return []
    attribute = table.ttl["AttributeName"]
    expired = []
    with _one_write_at_a_time:
        for item in list(table.all_items()):
            value = item.attrs.get(attribute)
            if value is None or value.type != "N":
                continue
            expiry = Decimal(value.value)
            if not now_s - TTL_IGNORED_AFTER_SECONDS <= expiry <= now_s:
                continue
            table.delete_item(item.hash_key, item.range_key)
            if table.stream_shard is not None:
                table.stream_shard.items[-1].record["userIdentity"] = dict(TTL_DELETION_IDENTITY)
            expired.append({name: value.to_json() for name, value in item.attrs.items() if name in _key_names(table)})
    return expired


def _key_names(table: Any) -> tuple[str, ...]:
    return tuple(name for name in (table.hash_key_attr, table.range_key_attr) if name)


def install() -> None:
    """Idempotent; safe with moto's threaded server."""
    from moto.dynamodb import models
    from moto.dynamodb.exceptions import MockValidationException
    from moto.dynamodb.models.dynamo_type import DynamoType
    from moto.dynamodb.models.table import Table
    from moto.dynamodb.responses import DynamoHandler

    if getattr(models.DynamoDBBackend.transact_write_items, "_tally_fixed", False):
        return

    def touched_keys(table: Table, transact_items: list[dict[str, Any]]) -> list[tuple[Any, Any]]:
        keys = []
        for item in transact_items:
            (_, operation), = item.items()
            if operation.get("TableName") != table.name:
                continue
            attributes = operation.get("Key") or operation.get("Item") or {}
            hash_value = DynamoType(attributes[table.hash_key_attr])
            range_value = DynamoType(attributes[table.range_key_attr]) if table.range_key_attr else None
            keys.append((hash_value, range_value))
        return keys

    def backup(table: Table) -> Table:
        saved = copy.copy(table)
        if table.range_key_attr:
            saved.items = defaultdict(dict, {h: dict(by_range) for h, by_range in table.items.items()})
        else:
            saved.items = defaultdict(dict, table.items)
        for hash_value, range_value in touched_keys(table, _active.transact_items):
            if range_value is None:
                if hash_value in table.items:
                    saved.items[hash_value] = copy.deepcopy(table.items[hash_value])
            elif range_value in table.items.get(hash_value, {}):
                saved.items[hash_value][range_value] = copy.deepcopy(table.items[hash_value][range_value])
        return saved

    def deepcopy(obj: Any, memo: dict[int, Any] | None = None) -> Any:
        backups = getattr(_active, "backups", None)
        if backups is None or not isinstance(obj, Table) or obj.stream_shard is not None:
            return copy.deepcopy(obj, memo)
        if id(obj) not in backups:
            backups[id(obj)] = backup(obj)
        return backups[id(obj)]

    original = models.DynamoDBBackend.transact_write_items

    @wraps(original)
    def transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
        with _one_write_at_a_time:
            _active.backups, _active.transact_items = {}, transact_items
            try:
                return original(self, transact_items)
            finally:
                _active.backups, _active.transact_items = None, None

    original_update = models.DynamoDBBackend.update_item

    @wraps(original_update)
    def update_item(self: Any, *args: Any, **kwargs: Any) -> Any:
        with _one_write_at_a_time:
            return original_update(self, *args, **kwargs)

    original_answer = DynamoHandler.update_item

    @wraps(original_answer)
    def answered_update_item(self: Any) -> Any:
        with _one_write_at_a_time:  # the item read before, the write and the answer, as one
            return original_answer(self)

    original_add = DynamoType.__add__

    def add(self: DynamoType, other: DynamoType) -> DynamoType:
        if self.type != other.type or not self.is_number():
            return original_add(self, other)
        try:
            total = _DYNAMODB_NUMBERS.add(Decimal(self.value), Decimal(other.value))
        except Overflow:  # before Inexact: an overflow is inexact too
            raise MockValidationException(NUMBER_OVERFLOW) from None
        except Subnormal:
            raise MockValidationException(NUMBER_UNDERFLOW) from None
        except Inexact:  # DynamoDB says "overflow" for a sum beyond 38 digits too (DynamoDB Local: "precision")
            raise MockValidationException(NUMBER_OVERFLOW) from None
        return DynamoType({"N": format(total, "f")})

    DynamoType.__add__ = add  # type: ignore[method-assign]
    _remember_member_keys()
    _remember_update_expressions()
    _query_one_partition()
    _validate_in_linear_time()
    _read_each_text_once()
    _list_moto_services_once()
    transact_write_items._tally_fixed = True  # type: ignore[attr-defined]
    models.copy = SimpleNamespace(deepcopy=deepcopy)  # type: ignore[assignment]
    models.DynamoDBBackend.transact_write_items = transact_write_items  # type: ignore[method-assign]
    models.DynamoDBBackend.update_item = update_item  # type: ignore[method-assign]
    DynamoHandler.update_item = answered_update_item  # type: ignore[method-assign]


def _remember_update_expressions() -> None:
    """Parse each update expression text once (see 6. above): a text that fails to parse raises each time."""
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser

    parse = lru_cache(maxsize=1024)(UpdateExpressionParser.make)
    UpdateExpressionParser.make = staticmethod(parse)  # type: ignore[method-assign]


def _validate_in_linear_time() -> None:
    """Each validation pass walked with its node table built once, tree copies from a pickled image, and the checks
    of the text alone made once per text and names (see 8. above)."""
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.ast_nodes import DepthFirstTraverser, Node

    # A pass maps node kinds to its own bound methods: one table, and one choice per kind of node, for a whole pass.
    # The walk is moto's, node for node: children first, left to right, the hook before each child (where a pass
    # has one), then the node itself replaced by what its kind's processor returns.
    plain_hook = DepthFirstTraverser.pre_processing_of_child
    is_node: dict[type, bool] = {}

    @wraps(DepthFirstTraverser.traverse_node_recursively)
    def traverse_node_recursively(self: DepthFirstTraverser, node: Any, child_id: int = -1) -> Any:
        table = tuple(self._processing_map().items())
        hook = None if type(self).pre_processing_of_child is plain_hook else self.pre_processing_of_child
        chosen: dict[type, Any] = {}

        def processor_for(kind: type, node: Any) -> Any:
            for processed, processor in table:
                if isinstance(node, processed):
                    return chosen.setdefault(kind, processor)
            return chosen.setdefault(kind, None)

        def walk(node: Any, child_id: int) -> Any:
            kind = type(node)
            known = is_node.get(kind)
            if known is None:
                known = is_node.setdefault(kind, isinstance(node, Node))
            if not known:
                return node
            parent = node.parent
            if node.children is not None:
                for index, child in enumerate(node.children):
                    if hook is not None:
                        hook(node, index)
                    walk(child, index)
            processor = chosen[kind] if kind in chosen else processor_for(kind, node)
            if processor is not None:
                node = processor(node)
                node.parent = parent
                if parent:
                    parent.children[child_id] = node
            return node

        return walk(node, child_id)

    # The validator copies the tree it is given before filling it in; the tree itself is left as parsed.
    @wraps(validators.deepcopy)
    def copied(obj: Any, memo: dict[int, Any] | None = None) -> Any:
        image = getattr(obj, "__dict__", {}).get("_tally_image") if memo is None else None
        return pickle.loads(image) if image is not None else copy.deepcopy(obj, memo)

    checked_alone = (validators.ActionCountValidator, validators.OverlappingPathsValidator)
    validator = validators.UpdateExpressionValidator
    create, validate_all = validator.__init__, validator.validate

    @wraps(create)
    def __init__(self: Any, expression: Any, *args: Any, **kwargs: Any) -> None:
        if "_tally_image" not in expression.__dict__:
            image = pickle.dumps(expression, pickle.HIGHEST_PROTOCOL)
            expression.__dict__["_tally_passed"] = set()  # the names with which the text alone passed
            expression.__dict__["_tally_image"] = image  # last: a tree with an image has its set
        self._tally_parsed = expression
        create(self, expression, *args, **kwargs)

    @wraps(validate_all)
    def validate(self: Any) -> Any:
        passed = self._tally_parsed.__dict__["_tally_passed"]
        names = frozenset((self.expression_attribute_names or {}).items())
        known = names in passed
        node = self.node_to_validate
        for processor in self.processors:
            if not (known and isinstance(processor, checked_alone)):
                node = processor.traverse(node)
        passed.add(names)  # every pass passed, the text's own checks among them
        return node

    DepthFirstTraverser.traverse_node_recursively = traverse_node_recursively  # type: ignore[method-assign]
    validators.deepcopy = copied
    validator.__init__ = __init__  # type: ignore[method-assign]
    validator.validate = validate  # type: ignore[method-assign]


def _read_each_text_once() -> None:
    """The handler's actions listed once per handler class, and each condition text lexed once (see 9. above)."""
    from moto.core import responses
    from moto.dynamodb.comparisons import ConditionExpressionParser

    responses.method_names_from_class = lru_cache(maxsize=None)(responses.method_names_from_class)

    lex = ConditionExpressionParser._lex_condition_expression

    @lru_cache(maxsize=4096)
    def tokens_of(text: str | None) -> tuple[tuple[Any, ...], ...]:
        """Tokens depend on the text alone; a text that does not lex raises each time, as no exception is kept."""
        alone = ConditionExpressionParser(text, None, None)
        return tuple((node.nonterminal, node.kind, node.text, node.value) for node in lex(alone))

    @wraps(lex)
    def lex_once(self: ConditionExpressionParser) -> deque[Any]:
        # Fresh nodes each time, as lexing makes them: the parser builds its tree from them.
        return deque(self.Node(*token, children=[]) for token in tokens_of(self.condition_expression))

    ConditionExpressionParser._lex_condition_expression = lex_once  # type: ignore[method-assign]


def _list_moto_services_once() -> None:
    """moto's services listed once, not on every request its server dispatches (see 10. above)."""
    from moto import backends

    listed = backends.list_of_moto_modules
    services = tuple(listed())

    @wraps(listed)
    def list_of_moto_modules() -> tuple[str, ...]:
        return services

    backends.list_of_moto_modules = list_of_moto_modules


def _query_one_partition() -> None:
    """A Query of a table with a sort key is handed its partition's items alone (see 7. above)."""
    from moto.dynamodb.models.table import Table

    query, every_item = Table.query, Table.all_items
    arguments = inspect.signature(query)

    @wraps(query)
    def partition_query(self: Table, *args: Any, **kwargs: Any) -> Any:
        asked = arguments.bind(self, *args, **kwargs).arguments
        if asked.get("index_name") is not None or not self.range_key_attr or asked.get("hash_key") is None:
            return query(self, *args, **kwargs)
        _active.partition = (self, asked["hash_key"])
        try:
            return query(self, *args, **kwargs)
        finally:
            _active.partition = None

    @wraps(every_item)
    def all_items(self: Table) -> Any:
        partition = getattr(_active, "partition", None)
        if partition is None or partition[0] is not self:
            return every_item(self)
        _active.partition = None  # once: the Query's own look at its candidates
        return sorted(self.items.get(partition[1], {}).values(), key=lambda item: item.range_key)

    Table.query = partition_query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def _remember_member_keys() -> None:
    """moto's attribute picker, asked which keys of a plain ``dict`` may hold a member, answers the same for the
    same shape and member every time: remember it (see 5. above). Any other kind of value goes the long way."""
    from moto.core.serialize import AttributePicker
    from moto.core.utils import MISSING, get_value

    picked = AttributePicker.__call__
    remembered: dict[tuple[Any, ...], tuple[tuple[str, ...], bool]] = {}

    @wraps(picked)
    def pick(self: AttributePicker, context: Any) -> Any:
        value = context.obj
        if type(value) is not dict:
            return picked(self, context)
        # Shapes are kept alive by the key, so no other shape can come to share one's id.
        known = (type(self), tuple(self.alias_providers), context.shape, context.key)
        keys_and_paths = remembered.get(known)
        if keys_and_paths is None:
            keys = tuple(self.get_possible_keys(context))
            keys_and_paths = remembered.setdefault(known, (keys, any("." in key for key in keys)))
        keys, paths = keys_and_paths
        member = None
        if paths:  # a dotted key is a path into the value: moto's own lookup
            for key in keys:
                found = get_value(value, key, MISSING)
                if found is not MISSING:
                    member = found
                    break
        else:  # as moto's lookup of a plain key in a dict answers
            for key in keys:
                if key in value:
                    member = value[key]
                    break
        if self.response_transformers:
            key_path = f"{context.key_path}.{context.key}"
            for transform_path, transform in self.response_transformers.items():
                if key_path.endswith(transform_path):
                    return transform(member)
        return member

    AttributePicker.__call__ = pick  # type: ignore[method-assign]
