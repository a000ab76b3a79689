"""Everything that learns from relevance judgments: hard-negative mining, reranker and embedder training, cards.

This package sits above :mod:`hybridsearch.query` (it mines negatives through the query layer) and
writes models that :mod:`hybridsearch.rerank` serves; serving never imports training.
"""
