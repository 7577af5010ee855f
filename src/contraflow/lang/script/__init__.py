"""tremor-script: parser, compiler to Python, reference interpreter and standard library."""
