"""Tests of plm.cpu."""
