"""Evaluation: BEIR collections, document-level IR metrics (ranx), reports, baselines, failure analysis.

``hsp eval DATASET`` (:mod:`hybridsearch.cli.eval`) drives :func:`hybridsearch.eval.harness.evaluate_collection`.
"""
