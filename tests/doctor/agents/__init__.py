"""The doctor's corpus: one small agent per cause of irreproducibility, and clean ones.

Each faulty line carries a ``# doctor: CAUSE`` marker; tests/doctor/test_corpus.py
expects exactly one finding per marker, at its file and line, and none elsewhere.
"""
