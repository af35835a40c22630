"""Tests of plm.tokenization."""
