"""The backfill's claims in the counts table: one export per table and count-from instant, one per rule added later.

Watermarks are kept per export, so counting a second export of the same instant would add every item
again; a claim, written before the first commit of a backfill, makes that impossible. A rule whose
history is backfilled on its own holds a claim of its own, whatever its instant: its history is
counted once, from one export, with the same companions.
"""

from __future__ import annotations

from botocore.exceptions import ClientError

from tally.core.tables import COUNTS_TABLE, TTL_ATTRIBUTE
from tally.dynamo.calls import TableAccess, error_code


class BackfillClaimed(RuntimeError):
    """The table's history at this instant is being, or was, counted from another export."""


BACKFILL_PREFIX = "#backfill#"
# Backfills of this release fold an export across its files under one watermark.
BACKFILL_PROTOCOL = "watermarks"
RULE_CLAIM_PREFIX = "rule#"  # a rule's claim's sort key: rule#<name> (a table's is its instant, which never starts so)


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
    ) -> None:
        """Tie a table's count-from instant to one export, or raise BackfillClaimed naming the other one.

        Watermarks are kept per export, so counting a second export of the
        same instant would add every item again; the claim makes that
        impossible. Claiming again with the same export (a resumed run)
        succeeds if it is counted the same way (``protocol``: this process's
        segments, or the in-account backfill's ranges, which place their
        writes differently), and never if the previous release began it: that
        release cut its segments file by file, so this one could not tell what it applied.
        """
        if rules:
            for rule in rules:
                self._claim_rule(table_arn, count_from_iso, export_arn, expires_s, protocol, rule, rules)
            return
        key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": count_from_iso}}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={
                    **key,
                    "export": {"S": export_arn},
                    "protocol": {"S": protocol},
                    TTL_ATTRIBUTE: {"N": str(expires_s)},
                },
                ConditionExpression="attribute_not_exists(#pk) OR (#export = :export AND #protocol = :protocol)",
                ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key, "#export": "export", "#protocol": "protocol"},
                ExpressionAttributeValues={":export": {"S": export_arn}, ":protocol": {"S": protocol}},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            claimed = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item", {})
            other = claimed.get("export", {}).get("S", "?")
            claimed_protocol = claimed.get("protocol", {}).get("S")
            if other == export_arn and claimed_protocol is not None:
                raise BackfillClaimed(
                    f"the backfill of {export_arn} was begun "
                    + ("in the account (backfill.py --stack)" if claimed_protocol != BACKFILL_PROTOCOL else "by one process (backfill.py --here)")
                    + ", which writes its segments at other places: finish it the same way"
                ) from None
            if other == export_arn:
                raise BackfillClaimed(
                    f"the backfill of {export_arn} was begun by the previous release of tally, which committed it "
                    "file by file with markers: finish it with that release"
                ) from None
            raise BackfillClaimed(
                f"the history of {table_arn} at {count_from_iso} is counted from export {other}; "
                f"counting {export_arn} too would count its items twice"
            ) from None

    def _claim_rule(
        self,
        table_arn: str,
        count_from_iso: str,
        export_arn: str,
        expires_s: int,
        protocol: str,
        rule: str,
        rules: tuple[str, ...],
    ) -> None:
        """Tie one rule's history to one export, instant, protocol and set of rules counted together, or raise
        BackfillClaimed: counted again from another export, at another instant or with other companions (another
        writer, whose watermarks this one cannot see), its history would be counted twice."""
        key = {COUNTS_TABLE.partition_key: {"S": BACKFILL_PREFIX + table_arn}, COUNTS_TABLE.sort_key: {"S": RULE_CLAIM_PREFIX + rule}}
        claim = {"export": export_arn, "protocol": protocol, "countFrom": count_from_iso, "rules": ",".join(sorted(rules))}
        try:
            self.client.put_item(
                TableName=self.table_name,
                Item={**key, **{name: {"S": value} for name, value in claim.items()}, TTL_ATTRIBUTE: {"N": str(expires_s)}},
                ConditionExpression="attribute_not_exists(#pk) OR (" + " AND ".join(f"#{name} = :{name}" for name in claim) + ")",
                ExpressionAttributeNames={"#pk": COUNTS_TABLE.partition_key, **{f"#{name}": name for name in claim}},
                ExpressionAttributeValues={f":{name}": {"S": value} for name, value in claim.items()},
            )
        except ClientError as error:
            if error_code(error) != "ConditionalCheckFailedException":
                raise
            held = self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True).get("Item", {})
            found = {name: held.get(name, {}).get("S", "?") for name in claim}
            if found["export"] == export_arn and found["rules"] != claim["rules"]:
                raise BackfillClaimed(
                    f"rule {rule!r} is counted from {export_arn} together with rules {found['rules']}: "
                    f"run the backfill again with --rules {found['rules'].replace(',', ' ')}"
                ) from None
            if found["export"] == export_arn:
                raise BackfillClaimed(
                    f"the backfill of rule {rule!r} from {export_arn} was begun "
                    + ("in the account (backfill.py --stack)" if found["protocol"] != BACKFILL_PROTOCOL else "by one process (backfill.py --here)")
                    + ", which writes its segments at other places: finish it the same way"
                ) from None
            raise BackfillClaimed(
                f"the history of rule {rule!r} is counted from export {found['export']} (at {found['countFrom']}); "
                f"counting {export_arn} too would count it twice (a changed rule is a new rule, with a new name)"
            ) from None
