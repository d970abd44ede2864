"""Samsa's benchmarks. Run each from the checkout as a module, e.g.
``python -m bench.run`` (see bench/README.md); what they share is in
``bench.common``. Nothing here is imported by Samsa itself."""
