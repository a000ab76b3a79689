"""The bi-encoder: model resolution and device choice (:mod:`.models`), the encoder (:mod:`.encoder`), its
ONNX Runtime backend (:mod:`.onnx`) and the lean query encoder of the search path (:mod:`.query`).

Import from the module that holds a name (``hybridsearch.embedding.encoder.Embedder``): this package imports
nothing itself, so that the search path's light modules (:mod:`.prompts`, :mod:`.catalogue`) do not load numpy
and the encoder with them (``tests/unit/test_dependencies.py``)."""
