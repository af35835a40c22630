"""Tests of plm.models."""
