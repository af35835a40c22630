"""Tests of plm.serve."""
