"""Query layer: BM25 + kNN in one _msearch, client-side fusion, optional rerank (``client.SearchClient``)."""
