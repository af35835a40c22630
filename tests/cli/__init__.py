"""Tests of plm.cli."""
