"""Tests of plm.apps."""
