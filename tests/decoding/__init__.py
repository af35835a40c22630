"""Tests of plm.decoding."""
