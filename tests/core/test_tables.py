from tally.core.tables import COUNTS_TABLE, EVENTS_TABLE


def test_events_table_has_a_new_image_stream_and_no_ttl():
    request = EVENTS_TABLE.create_table_request("events")
    assert request["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert request["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "NEW_IMAGE"}
    assert request["BillingMode"] == "PAY_PER_REQUEST"
    assert EVENTS_TABLE.ttl_request("events") is None


def test_counts_table_is_keyed_by_counter_and_bucket_with_ttl():
    request = COUNTS_TABLE.create_table_request("counts")
    assert request["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    assert {d["AttributeName"]: d["AttributeType"] for d in request["AttributeDefinitions"]} == {"pk": "S", "sk": "S"}
    assert "StreamSpecification" not in request
    assert COUNTS_TABLE.ttl_request("counts") == {
        "TableName": "counts",
        "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "ttl"},
    }
