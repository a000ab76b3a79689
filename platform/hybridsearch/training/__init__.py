"""Learning from relevance judgments: hard-negative mining, reranker and embedder training, cards.

It mines through :mod:`hybridsearch.query`; :mod:`hybridsearch.rerank` serves its models without importing it."""
