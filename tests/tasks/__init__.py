"""Tests of plm.tasks."""
