"""Tests of plm.core."""
