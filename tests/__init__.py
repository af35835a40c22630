"""Tests of plm."""
