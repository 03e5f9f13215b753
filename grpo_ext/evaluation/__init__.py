"""Evaluation harness: sampling backends, metrics (pass@k, maj@k), sample cache and reports."""
