"""In-memory test doubles of production storage contracts, for unit tests and benchmarks.

    chunk_storage     InMemoryChunkStorage: server.tier2.chunk_storage.ChunkStorage in dicts
    slts_metadata     InMemoryMetadataStore: server.tier2.metadata_store.MetadataStore in a dict,
                      with knobs to fence it and fail writes
    key_value_store   InMemoryKeyValueStore: controller.store.key_value.VersionedKeyValueStore in
                      sorted dicts

Test support only: no production path (CLI option, default, embedding API) reaches them. The in-memory
Tier-1 log (``server/tier1/memory.py``, ``--tier1 memory``) is a production option and lives in server/.
"""
