"""Local persistence: apsw database, migrations runner, HNSW index, embedder."""
