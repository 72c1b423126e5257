"""The host side of a run, written once for every compiled backend (glsl, wgpu, cpu).

A stage between ``call/`` (what a call is) and ``backends/`` (what runs it): it may
import ``call`` and below, never a backend (tests/test_layering.py).
"""
