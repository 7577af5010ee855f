"""Pre- and postprocessors: byte-stream framing and per-frame transforms, apart from the codecs.

A preprocessor chain turns a connector's byte stream into frames for the
codec (`separate`, `length-prefixed`, `decompress`, ...); a postprocessor
chain turns encoded frames back into a byte stream. Codecs (one frame <->
one value) live one level up, in `contraflow.codecs`.
"""
