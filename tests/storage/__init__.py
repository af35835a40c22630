"""Tests of plm.storage."""
