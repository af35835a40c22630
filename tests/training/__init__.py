"""Tests of plm.training."""
