"""Tests of plm.objectives."""
