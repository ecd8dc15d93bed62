"""The backfill's claims in the counts table: one export per table, one per rule or calendar prefix added later.

Watermarks are kept per export, so counting a second export of the same instant would add every item
again; a claim, written before the first commit of a backfill, makes that impossible. Nor is a table's
history counted again at a later (or earlier) instant: an export then holds every item counted already,
by the first backfill and by the stream since, so the table's claim is kept for good, and a whole-table
backfill at another instant is refused while it is held. A rule whose history is backfilled on its own
holds a claim of its own, whatever its instant: its history is counted once, from one export, with the
same companions; so does a calendar prefix whose days' history is backfilled (``backfill.py --calendar``).
"""

from __future__ import annotations

import re

from botocore.exceptions import ClientError

from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE
from tally.dynamo.calls import TableAccess, error_code


class BackfillClaimed(RuntimeError):
    """The table's history at this instant is being, or was, counted from another export."""


BACKFILL_PREFIX = "#backfill#"
# Backfills of this release fold an export across its files under one watermark.
BACKFILL_PROTOCOL = "watermarks"
RULE_CLAIM_PREFIX = "rule#"  # a rule's claim's sort key: rule#<name> (a table's is its instant, which never starts so)
CALENDAR_CLAIM_PREFIX = "calendar#"  # a calendar prefix's: calendar#<prefix>
# What a whole-table backfill refused for a history counted already may have meant instead.
RULES_ALONE = "a rule added later has its history backfilled alone, with --rules"
TABLE_CLAIM_KEY = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # a table's claim's sort key: its instant


class Named:
    """What a claim of named histories is about: rules (``--rules``) or calendar prefixes (``--calendar``)."""

    def __init__(self, sort_prefix: str, noun: str, plural: str, flag: str) -> None:
        self.sort_prefix, self.noun, self.plural, self.flag = sort_prefix, noun, plural, flag


RULES = Named(RULE_CLAIM_PREFIX, "rule", "rules", "--rules")
CALENDAR = Named(CALENDAR_CLAIM_PREFIX, "calendar prefix", "calendar prefixes", "--calendar")


class BackfillClaims(TableAccess):
    """The backfill claims of ``CountsTable``."""

    def claim_backfill(
        self,
        table_arn: str,
        count_from_iso: str,
        export_arn: str,
        expires_s: int,
        protocol: str = BACKFILL_PROTOCOL,
        rules: tuple[str, ...] = (),
        calendar: tuple[str, ...] = (),
    ) -> None:
        """Tie a table's count-from instant to one export, or raise BackfillClaimed naming the other one.

        Watermarks are kept per export, so counting a second export of the
        same instant would add every item again; the claim makes that
        impossible. The table's history claimed at another instant refuses
        it too (``expires_s`` is when a rule's or prefix's claim expires; the
        table's is kept for good). Claiming again with the same export (a resumed run)
        succeeds if it is counted the same way (``protocol``: this process's
        segments, or the in-account backfill's ranges, which place their
        writes differently), and never if the previous release began it: that
        release cut its segments file by file, so this one could not tell what it applied.
        """
        for names, kind in ((rules, RULES), (calendar, CALENDAR)):
            for name in names:
                self._claim_named(table_arn, count_from_iso, export_arn, expires_s, protocol, name, names, kind)
            if names:
                return
        refusal = self._counted_at_another_instant(table_arn, count_from_iso)
        if refusal is not None:
            raise BackfillClaimed(f"{refusal}; {RULES_ALONE}")
        # Kept for good, not until ``expires_s``: what it counted lives in days and months for years, and the
        # stream counts on from its instant, so no later export of the table may be counted on top.
        held = self._put_claim(count_from_iso, table_arn, {"export": export_arn, "protocol": protocol}, None)
        if held is None:
            return
        other, claimed_protocol = held.get("export", "?"), held.get("protocol")
        if other == export_arn and claimed_protocol is not None:
            raise BackfillClaimed(_begun_elsewhere(f"the backfill of {export_arn}", claimed_protocol))
        if other == export_arn:
            raise BackfillClaimed(
                f"the backfill of {export_arn} was begun by the previous release of tally, which committed it "
                "file by file with markers: finish it with that release"
            )
        raise BackfillClaimed(
            f"the history of {table_arn} at {count_from_iso} is counted from export {other}; "
            f"counting {export_arn} too would count its items twice"
        )

    def _claim_named(
        self,
        table_arn: str,
        count_from_iso: str,
        export_arn: str,
        expires_s: int,
        protocol: str,
        name: str,
        names: tuple[str, ...],
        kind: Named,
    ) -> None:
        """Tie one rule's (or calendar prefix's) history to one export, instant, protocol and set of names counted
        together, or raise BackfillClaimed: counted again from another export, at another instant or with other
        companions (another writer, whose watermarks this one cannot see), its history would be counted twice."""
        # The companions stay in the "rules" attribute for both kinds: claims held before read the same.
        claim = {"export": export_arn, "protocol": protocol, "countFrom": count_from_iso, "rules": ",".join(sorted(names))}
        held = self._put_claim(kind.sort_prefix + name, table_arn, claim, expires_s)
        if held is None:
            return
        if held.get("export") == export_arn and held.get("rules") != claim["rules"]:
            companions = held.get("rules", "?")
            raise BackfillClaimed(
                f"{kind.noun} {name!r} is counted from {export_arn} together with {kind.plural} {companions}: "
                f"run the backfill again with {kind.flag} {companions.replace(',', ' ')}"
            )
        if held.get("export") == export_arn:
            raise BackfillClaimed(_begun_elsewhere(f"the backfill of {kind.noun} {name!r} from {export_arn}", held.get("protocol")))
        again = "a changed rule is a new rule, with a new name" if kind is RULES else "its days hold it already"
        raise BackfillClaimed(
            f"the history of {kind.noun} {name!r} is counted from export {held.get('export', '?')} (at "
            f"{held.get('countFrom', '?')}); counting {export_arn} too would count it twice ({again})"
        )

    def new_export_refusal(
        self, table_arn: str, count_from_iso: str, rules: tuple[str, ...] = (), calendar: tuple[str, ...] = ()
    ) -> str | None:
        """Why a new export of ``table_arn`` must not be started for this history, or None: a claim already ties it
        to an export, and counting a second one would be refused by ``claim_backfill`` once that one (billed, and
        taking minutes to hours) had finished. Read strongly consistent; the claim itself is still put by
        ``claim_backfill`` before the first commit, so two backfills started at once still count one export."""
        names, kind = (rules, RULES) if rules else (calendar, CALENDAR)
        if not names:
            refusal = self._counted_at_another_instant(table_arn, count_from_iso)
            if refusal is not None:
                return f"{refusal}; no new export is started ({RULES_ALONE})"
        for sort_key, what in (
            [(kind.sort_prefix + name, f"{kind.noun} {name!r}") for name in names] if names else [(count_from_iso, None)]
        ):
            key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": sort_key}}
            held = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item")
            if held is None:
                continue
            export = held.get("export", {}).get("S", "?")
            if what is None:
                history, resume = f"the history of {table_arn} at {count_from_iso}", f"--export-arn {export}"
            else:
                companions = held.get("rules", {}).get("S", names[0]).replace(",", " ")
                at = held.get("countFrom", {}).get("S", "?")
                history, resume = f"the history of {what} (at {at})", f"{kind.flag} {companions} --export-arn {export}"
            return (
                f"{history} is counted from export {export}: no new export is started, as a second one would count "
                f"it twice; to resume that backfill if it did not finish, run with {resume}"
            )
        return None

    def _counted_at_another_instant(self, table_arn: str, count_from_iso: str) -> str | None:
        """Why the whole history of ``table_arn`` at ``count_from_iso`` must not be counted, in one line, or None:
        a claim holds it at another instant (read strongly consistent)."""
        query = {
            "TableName": self.table_name,
            "KeyConditionExpression": "#pk = :pk",
            "ExpressionAttributeNames": {"#pk": COUNTS_TABLE.partition_key},
            "ExpressionAttributeValues": {":pk": {"S": BACKFILL_PREFIX + table_arn}},
            "ConsistentRead": True,
        }
        while True:
            page = self.client.query(**query)
            for item in page.get("Items", []):
                instant = item[COUNTS_TABLE.sort_key]["S"]
                if instant != count_from_iso and TABLE_CLAIM_KEY.fullmatch(instant):
                    export = item.get("export", {}).get("S", "?")
                    return (
                        f"the history of {table_arn} is counted already, at {instant} from export {export}, and the "
                        f"stream has counted since: a whole-table backfill at {count_from_iso} would count those "
                        "items twice"
                    )
            if "LastEvaluatedKey" not in page:
                return None
            query["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def _put_claim(
        self, sort_key: str, table_arn: str, claim: dict[str, str], expires_s: int | None
    ) -> dict[str, str] | None:
        """Put the claim unless another is held there: None once it is the table's (put now, or the same claim
        put before), else the claim held (its string attributes), read strongly consistent. ``expires_s`` None:
        the claim never expires."""
        key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": sort_key}}
        expiry = {} if expires_s is None else {TTL_ATTRIBUTE: {"N": str(expires_s)}}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={**key, **{name: {"S": value} for name, value in claim.items()}, **expiry},
                ConditionExpression="attribute_not_exists(#pk) OR (" + " AND ".join(f"#{name} = :{name}" for name in claim) + ")",
                ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key, **{f"#{name}": name for name in claim}},
                ExpressionAttributeValues={f":{name}": {"S": value} for name, value in claim.items()},
            )
            return None
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
        held = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item", {})
        return {name: value["S"] for name, value in held.items() if "S" in value}


def _begun_elsewhere(what: str, protocol: str | None) -> str:
    """Why a backfill begun one way (one process, or the account's ranges) cannot be finished the other way."""
    where = "by one process (backfill.py --here)" if protocol == BACKFILL_PROTOCOL else "in the account (backfill.py --stack)"
    return f"{what} was begun {where}, which writes its segments at other places: finish it the same way"
