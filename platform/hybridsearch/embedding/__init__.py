"""The bi-encoder: model location and file records, the one encoder, ONNX, the catalogue, prompts and the vector
cache. Import from the module that holds a name; this package imports nothing itself, so the search path's light
modules do not load numpy."""
