"""A mongodb:// catalog URL selects motor's real client, and names the database."""

from __future__ import annotations

from motor.motor_asyncio import AsyncIOMotorClient

from nexus_core.mongo_catalog import connect, default_database, is_mongodb_url


def test_only_mongodb_urls_select_the_mongodb_backend():
    assert is_mongodb_url("mongodb://db:27017/nexus")
    assert is_mongodb_url("mongodb+srv://cluster.example/nexus")
    assert not is_mongodb_url("postgresql://db/nexus")
    assert not is_mongodb_url(None)


async def test_connect_uses_motor_and_the_database_in_the_url():
    # motor connects lazily: nothing is contacted until the first operation.
    named = connect("mongodb://127.0.0.1:1/catalogdb?serverSelectionTimeoutMS=100")
    bare = connect("mongodb://127.0.0.1:1")
    try:
        assert type(named) is AsyncIOMotorClient
        assert default_database(named).name == "catalogdb"
        assert default_database(bare).name == "nexus"
        assert named.codec_options.tz_aware
    finally:
        named.close()
        bare.close()
