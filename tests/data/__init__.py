"""Tests of plm.data."""
