"""Tests of plm.hf."""
