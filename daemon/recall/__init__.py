"""Recall: candidates from every retriever, fusion, the cold tier's search and what ranking learned."""
