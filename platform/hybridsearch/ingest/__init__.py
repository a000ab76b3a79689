"""Ingestion: read sources, chunk, embed and bulk-write documents."""
