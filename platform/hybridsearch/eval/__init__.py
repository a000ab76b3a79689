"""Evaluation: BEIR collections, document-level IR metrics (ranx), reports, baselines, failure analysis."""
